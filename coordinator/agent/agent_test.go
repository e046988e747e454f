package agent

import (
	"context"
	"errors"
	"testing"

	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/rank"
)

// TestWaitPolicyReformsAfterLostFollower: under OnPeerLossWait, a
// follower that crashes mid-request stops the world; rank 0 holds the
// request, the survivor follows rank 0 into epoch 1 once a new rank 2
// joins, and the request finishes with every token it asked for.
func TestWaitPolicyReformsAfterLostFollower(t *testing.T) {
	j := newJob(t, 3, func(c *Config) { c.OnPeerLoss = OnPeerLossWait })
	ms := j.startWorld()
	g := j.generate(11, 400)
	g.waitTokens(t, 20)

	j.crash(ms[2])
	j.waitState(ms[0], 0, rank.StateReforming)
	ms[2] = j.start(2, "", []string{ms[0].addr})
	for _, m := range ms {
		j.waitState(m, 1, "running", "ready")
	}
	rep, err := g.wait(t)
	if err != nil || len(rep.Tokens) != 400 {
		t.Fatalf("held request: %v, %d tokens; want 400", err, tokens(rep))
	}
	j.digestsAgree(ms...)
}

// TestPeerLeavingStopsOthersCleanly: a rank that stops on purpose leaves
// the cluster announcing it, and every other rank stops with it, cleanly.
func TestPeerLeavingStopsOthersCleanly(t *testing.T) {
	j := newJob(t, 3, nil)
	ms := j.startWorld()
	ms[1].cancel()
	for _, m := range ms {
		if err := m.wait(t); err != nil {
			t.Errorf("rank %d: Run returned %v, want nil (a clean stop)", m.rank, err)
		}
	}
}

// TestClosedBusAborts: a bus closed for good (NATS reconnects exhausted)
// aborts the rank's decode loop with rank.ErrAborted, naming the rank.
func TestClosedBusAborts(t *testing.T) {
	j := newJob(t, 2, nil)
	ms := j.startWorld()
	close(ms[1].closed)
	err := ms[1].wait(t)
	if !errors.Is(err, rank.ErrAborted) {
		t.Fatalf("Run returned %v, want an error wrapping rank.ErrAborted", err)
	}
	// Its peer sees a lost rank (fail policy) and stops too.
	if err := ms[0].wait(t); !errors.Is(err, rank.ErrPeerLost) {
		t.Fatalf("rank 0: Run returned %v, want rank.ErrPeerLost", err)
	}
}

// TestRank0Restart: under OnPeerLossWait, rank 0 crashes and is
// started again at its address with its original settings (no peers to
// join); the followers re-form around the new rank 0 (a new leader) in its
// epoch, and the job serves requests again.
func TestRank0Restart(t *testing.T) {
	j := newJob(t, 3, func(c *Config) { c.OnPeerLoss = OnPeerLossWait })
	ms := j.startWorld()
	rep, err := j.generate(3, 30).wait(t)
	if err != nil {
		t.Fatal(err)
	}
	before := rep.Tokens

	j.crash(ms[0])
	j.waitState(ms[1], 0, rank.StateReforming)
	ms[0] = j.start(0, ms[0].addr, nil)
	for _, m := range ms {
		j.waitState(m, 0, "running", "ready")
	}
	rep, err = j.generate(3, 30).wait(t)
	if err != nil {
		t.Fatalf("after the restart: %v", err)
	}
	if !equalTokens(rep.Tokens, before) {
		t.Errorf("seeded request gave %v after the restart, %v before", rep.Tokens, before)
	}
	j.digestsAgree(ms...)
}

// TestRunOnceAndStatusBeforeRun: Status answers before Run (joining), and
// Run refuses a second call.
func TestRunOnceAndStatusBeforeRun(t *testing.T) {
	j := newJob(t, 1, nil)
	a, err := New(j.config(0, nil))
	if err != nil {
		t.Fatal(err)
	}
	if st := a.Status(); st.State != "joining" || st.World != 1 {
		t.Fatalf("status before Run: %+v", st)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = a.Run(ctx)
	if err := a.Run(ctx); !errors.Is(err, ErrRunTwice) {
		t.Fatalf("second Run: %v, want ErrRunTwice", err)
	}
}

// tokens is how many tokens rep carries (-1 without a reply).
func tokens(rep *api.GenerateReply) int {
	if rep == nil {
		return -1
	}
	return len(rep.Tokens)
}

func equalTokens(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
