package rank

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/internal/poll"
	"github.com/tpcoord/tpcoord/rank/client"
	"github.com/tpcoord/tpcoord/rank/core"
)

const (
	testLeader  = 0x51
	otherLeader = 0x52
)

func publishHeartbeat(t *testing.T, tr broadcast.Transport, subject string, hb broadcast.Heartbeat) {
	t.Helper()
	if err := tr.Publish(&broadcast.Msg{Subject: subject, Data: drvCodec.AppendHeartbeat(nil, &hb)}); err != nil {
		t.Fatal(err)
	}
}

// heartbeatLog records the heartbeats published on one subject.
type heartbeatLog struct {
	mu  sync.Mutex
	hbs []broadcast.Heartbeat
}

func watchHeartbeats(t *testing.T, tr broadcast.Transport, subject string) *heartbeatLog {
	t.Helper()
	l := &heartbeatLog{}
	unsub, err := tr.Subscribe(subject, func(m *broadcast.Msg) {
		var hb broadcast.Heartbeat
		if err := drvCodec.DecodeHeartbeat(m.Data, &hb); err != nil {
			t.Errorf("undecodable heartbeat on %s: %v", subject, err)
			return
		}
		l.mu.Lock()
		l.hbs = append(l.hbs, hb)
		l.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unsub() })
	return l
}

// last returns the latest heartbeat that satisfies match.
func (l *heartbeatLog) last(match func(broadcast.Heartbeat) bool) (broadcast.Heartbeat, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := len(l.hbs) - 1; i >= 0; i-- {
		if match(l.hbs[i]) {
			return l.hbs[i], true
		}
	}
	return broadcast.Heartbeat{}, false
}

// startWithLeader starts rank (of 2) with leader testLeader, and a second
// hub connection on which the test plays the other rank, or another rank
// 0. The cleanup stops the rank and closes the connection.
func startWithLeader(t *testing.T, rank int) (context.CancelFunc, *runningRank, broadcast.Transport) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	hub := broadcast.NewHub()
	cfg := driverConfig(rank, 2)
	cfg.Leader = testLeader
	r := startRank(t, ctx, hub, cfg)
	pub := hub.Connect()
	t.Cleanup(func() { cancel(); _ = r.wait(t); pub.Close() })
	return cancel, r, pub
}

// TestLeaderRefusesOtherLeaderHeartbeat: rank 0 refuses and counts a
// follower heartbeat that names another leader (the follower applied a
// stale rank 0's steps) and a rank 0 heartbeat from another rank 0
// process; it accepts leader 0 (no step applied yet) and its own ID. Its
// own heartbeats carry its ID.
func TestLeaderRefusesOtherLeaderHeartbeat(t *testing.T) {
	_, r, pub := startWithLeader(t, 0)
	own := watchHeartbeats(t, pub, drvSubj.Heartbeat(0))
	poll.Until(t, 10*time.Second, "rank 0 never became ready", func() bool { return r.d.Status().State == "ready" })
	poll.Until(t, 10*time.Second, "no heartbeat from rank 0", func() bool {
		_, ok := own.last(func(hb broadcast.Heartbeat) bool { return hb.Phase == broadcast.PhaseReady })
		return ok
	})
	if hb, _ := own.last(func(broadcast.Heartbeat) bool { return true }); hb.Leader != testLeader {
		t.Fatalf("rank 0's heartbeat names leader %08x, want %08x", hb.Leader, testLeader)
	}

	peer := func() api.PeerStatus { return r.d.Status().Peers[0] }
	refused := func() uint64 { return r.d.Status().Rejected["heartbeat_other_leader"] }
	hb1 := broadcast.Heartbeat{Epoch: 1, Rank: 1, Phase: broadcast.PhaseReady, Leader: otherLeader}
	publishHeartbeat(t, pub, drvSubj.Heartbeat(1), hb1)
	publishHeartbeat(t, pub, drvSubj.Heartbeat(0), broadcast.Heartbeat{Epoch: 1, Rank: 0, Phase: broadcast.PhaseRunning, Applied: 9, Leader: otherLeader})
	poll.Until(t, 10*time.Second, "other leaders' heartbeats not counted", func() bool { return refused() == 2 })
	if p := peer(); p.State != "unknown" || p.HeartbeatAgeMs != -1 {
		t.Fatalf("rank 1 after a heartbeat naming another leader: %+v, want it unheard", p)
	}

	// Leader 0 (nothing applied yet), then this rank 0's ID: both count.
	hb1.Leader = 0
	publishHeartbeat(t, pub, drvSubj.Heartbeat(1), hb1)
	poll.Until(t, 10*time.Second, "rank 1's heartbeat with leader 0 not taken", func() bool { return peer().State == "ready" })
	hb1.Leader, hb1.Phase = testLeader, broadcast.PhaseRunning
	publishHeartbeat(t, pub, drvSubj.Heartbeat(1), hb1)
	poll.Until(t, 10*time.Second, "rank 1's heartbeat with this leader not taken", func() bool { return peer().State == "running" })
	// Rank 0's own heartbeats kept coming all along, never refused.
	if n := refused(); n != 2 {
		t.Fatalf("heartbeat_other_leader = %d, want 2", n)
	}
}

// TestFollowerRefusesOtherLeaderHeartbeat: a follower refuses and counts
// rank 0 heartbeats from another leader: they neither keep rank 0 alive
// nor send the follower after steps. Its own heartbeats name leader 0
// until it applies a step, then that step's leader.
func TestFollowerRefusesOtherLeaderHeartbeat(t *testing.T) {
	cancel, r, pub := startWithLeader(t, 1)
	own := watchHeartbeats(t, pub, drvSubj.Heartbeat(1))
	replays := 0
	var mu sync.Mutex
	unsub, err := pub.Subscribe(drvSubj.Replay(), func(*broadcast.Msg) { mu.Lock(); replays++; mu.Unlock() })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unsub() })
	poll.Until(t, 10*time.Second, "follower never became ready", func() bool { return r.d.Status().State == "ready" })
	poll.Until(t, 10*time.Second, "no ready heartbeat from the follower", func() bool {
		_, ok := own.last(func(hb broadcast.Heartbeat) bool { return hb.Phase == broadcast.PhaseReady })
		return ok
	})
	if hb, _ := own.last(func(hb broadcast.Heartbeat) bool { return hb.Phase == broadcast.PhaseReady }); hb.Leader != 0 {
		t.Fatalf("heartbeat before any step names leader %08x, want 0", hb.Leader)
	}

	publishStep(t, pub, &broadcast.Step{Epoch: 1, Leader: testLeader, Step: 1, Admitted: []broadcast.Admission{{Seq: 1, Prompt: []int32{4}}}})
	poll.Until(t, 10*time.Second, "step 1 not applied", func() bool { return r.d.Status().Step == 1 })
	poll.Until(t, 10*time.Second, "no heartbeat after step 1", func() bool {
		_, ok := own.last(func(hb broadcast.Heartbeat) bool { return hb.Applied == 1 })
		return ok
	})
	if hb, _ := own.last(func(hb broadcast.Heartbeat) bool { return hb.Applied == 1 }); hb.Leader != testLeader {
		t.Fatalf("heartbeat after step 1 names leader %08x, want %08x", hb.Leader, testLeader)
	}

	r.d.mu.Lock()
	heard := r.d.peerTab.Heard(0)
	r.d.mu.Unlock()
	// Two heartbeats would do: the second makes the first's step count.
	stale := broadcast.Heartbeat{Epoch: 1, Rank: 0, Phase: broadcast.PhaseRunning, Applied: 9, Leader: otherLeader}
	publishHeartbeat(t, pub, drvSubj.Heartbeat(0), stale)
	publishHeartbeat(t, pub, drvSubj.Heartbeat(0), stale)
	stale.Leader = 0 // a rank 0 without an ID is not this job's either
	publishHeartbeat(t, pub, drvSubj.Heartbeat(0), stale)
	poll.Until(t, 10*time.Second, "other leaders' heartbeats not counted", func() bool {
		return r.d.Status().Rejected["heartbeat_other_leader"] == 3
	})
	r.d.mu.Lock()
	leader, leaderNow, heardAfter := r.d.f.leader, r.d.f.leaderNow, r.d.peerTab.Heard(0)
	r.d.mu.Unlock()
	if leader != 0 || leaderNow != 0 || !heardAfter.Equal(heard) {
		t.Fatalf("refused heartbeats were applied: rank 0 at %d/%d, heard %v (was %v)", leader, leaderNow, heardAfter, heard)
	}

	// The real rank 0's heartbeat is taken.
	publishHeartbeat(t, pub, drvSubj.Heartbeat(0), broadcast.Heartbeat{Epoch: 1, Rank: 0, Phase: broadcast.PhaseRunning, Applied: 1, Leader: testLeader})
	poll.Until(t, 10*time.Second, "this leader's heartbeat not taken", func() bool {
		r.d.mu.Lock()
		defer r.d.mu.Unlock()
		return r.d.f.leaderNow == 1 && !r.d.peerTab.Heard(0).Equal(heard)
	})
	mu.Lock()
	n := replays
	mu.Unlock()
	if st := r.d.Status(); n != 0 || st.Step != 1 || st.State != "running" {
		t.Fatalf("after the heartbeats: %d replay requests, status %+v", n, st)
	}
	cancel()
	if err := r.wait(t); err != nil {
		t.Fatalf("Run = %v after cancel, want nil", err)
	}
}

// TestFollowerRefusesOtherLeaderReplay: a replay reply served by another
// rank 0 is refused and counted and its steps are never applied, even
// though they carry the right leader; the follower asks again and takes
// the real rank 0's reply.
func TestFollowerRefusesOtherLeaderReplay(t *testing.T) {
	cancel, r, pub := startWithLeader(t, 1)
	poll.Until(t, 10*time.Second, "follower never became ready", func() bool { return r.d.Status().State == "ready" })

	steps := []*broadcast.Step{
		{Epoch: 1, Leader: testLeader, Step: 1, Admitted: []broadcast.Admission{{Seq: 1, Prompt: []int32{4}}}},
		{Epoch: 1, Leader: testLeader, Step: 2, Tokens: []broadcast.Token{{Seq: 1, Token: 9}}},
		{Epoch: 1, Leader: testLeader, Step: 3, Tokens: []broadcast.Token{{Seq: 1, Token: 10}}},
	}
	// What the other rank 0 serves as step 2: well-formed and stamped
	// with this job's leader, but not what rank 0 published.
	forged := &broadcast.Step{Epoch: 1, Leader: testLeader, Step: 2, Tokens: []broadcast.Token{{Seq: 1, Token: 9}},
		Admitted: []broadcast.Admission{{Seq: 2, Prompt: []int32{5}}}}
	var (
		mu       sync.Mutex
		requests int
	)
	unsub, err := pub.Subscribe(drvSubj.Replay(), func(m *broadcast.Msg) {
		var req broadcast.ReplayRequest
		if err := drvCodec.DecodeReplayRequest(m.Data, &req); err != nil {
			t.Errorf("replay request: %v", err)
			return
		}
		mu.Lock()
		requests++
		first := requests == 1
		mu.Unlock()
		rep := broadcast.ReplayReply{Epoch: 1, Oldest: 1, Leader: testLeader}
		if first {
			rep.Leader = otherLeader
			rep.Steps = [][]byte{drvCodec.AppendStep(nil, forged)}
		} else {
			for k := req.From; k <= req.To; k++ {
				rep.Steps = append(rep.Steps, drvCodec.AppendStep(nil, steps[k-1]))
			}
		}
		_ = pub.Publish(&broadcast.Msg{Subject: m.Reply, Data: drvCodec.AppendReplayReply(nil, &rep)})
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unsub() })

	publishStep(t, pub, steps[0])
	poll.Until(t, 10*time.Second, "step 1 not applied", func() bool { return r.d.Status().Step == 1 })
	publishStep(t, pub, steps[2]) // step 2 "lost": a gap
	poll.Until(t, 10*time.Second, "the gap was not filled", func() bool { return r.d.Status().Step == 3 })

	want := core.NewMirror(1)
	for _, st := range steps {
		if err := want.Apply(st); err != nil {
			t.Fatal(err)
		}
	}
	st := r.d.Status()
	mu.Lock()
	n := requests
	mu.Unlock()
	if st.Rejected["replay_other_leader"] != 1 || n != 2 {
		t.Errorf("replay_other_leader %d after %d requests, want 1 after 2", st.Rejected["replay_other_leader"], n)
	}
	if st.Rows != 1 || st.Digest != digestString(want.Digest()) {
		t.Errorf("status %+v: want 1 row and digest %s (the forged step applied?)", st, digestString(want.Digest()))
	}
	cancel()
	if err := r.wait(t); err != nil {
		t.Fatalf("Run = %v after cancel, want nil", err)
	}
}

// TestFollowerRefusesOnlyOtherLeaderReplays: when every reply comes from
// another rank 0 the follower gives up after its retries, with an error
// that says so, having applied none of them.
func TestFollowerRefusesOnlyOtherLeaderReplays(t *testing.T) {
	_, f, p := startWithLeader(t, 1)
	poll.Until(t, 10*time.Second, "follower never became ready", func() bool { return f.d.Status().State == "ready" })
	unsub, err := p.Subscribe(drvSubj.Replay(), func(m *broadcast.Msg) {
		rep := broadcast.ReplayReply{Epoch: 1, Status: broadcast.ReplayWrongEpoch, Leader: otherLeader}
		_ = p.Publish(&broadcast.Msg{Subject: m.Reply, Data: drvCodec.AppendReplayReply(nil, &rep)})
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unsub() })
	publishStep(t, p, &broadcast.Step{Epoch: 1, Leader: testLeader, Step: 1})
	poll.Until(t, 10*time.Second, "step 1 not applied", func() bool { return f.d.Status().Step == 1 })
	publishStep(t, p, &broadcast.Step{Epoch: 1, Leader: testLeader, Step: 3})
	err = f.wait(t)
	if !errors.Is(err, ErrAborted) || !strings.Contains(err.Error(), "replay reply from leader 00000052") {
		t.Fatalf("Run = %v, want ErrAborted naming the other leader's replies", err)
	}
	// The other rank 0's wrong-epoch refusal was not taken for this
	// job's rank 0's word either: the error is about the leader.
	if st := f.d.Status(); st.Step != 1 || st.Rejected["replay_other_leader"] != 5 {
		t.Fatalf("status %+v: want step 1 and 5 refused replies", st)
	}
}

// TestStepQueueBytes: the follower's queue of received steps takes a step
// only while its bytes stay within StepQueueBytes, except into an empty
// queue, and gives the bytes back as the loop dequeues.
func TestStepQueueBytes(t *testing.T) {
	ex, err := NewSynthetic(SyntheticConfig{Vocab: drvVocab, EOS: drvEOS})
	if err != nil {
		t.Fatal(err)
	}
	hub := broadcast.NewHub()
	tr := hub.Connect()
	defer tr.Close()
	cfg := driverConfig(1, 2)
	cfg.StepQueueBytes = 100
	d := NewDriver(cfg, tr, ex, nil) // not running: nothing dequeues
	msg := func(k uint64, rows int) *broadcast.Msg {
		st := &broadcast.Step{Epoch: 1, Step: k}
		for i := range rows {
			st.Tokens = append(st.Tokens, broadcast.Token{Seq: uint64(i + 1)})
		}
		return &broadcast.Msg{Subject: drvSubj.Step(), Data: drvCodec.AppendStep(nil, st)}
	}
	full := func() uint64 { return d.Status().Rejected["step_queue_full"] }
	one := int64(len(msg(1, 1).Data)) // 84 bytes
	d.onStep(msg(1, 1))
	d.onStep(msg(2, 1)) // 168 > 100: dropped
	if len(d.f.steps) != 1 || d.f.queued.Load() != one || full() != 1 {
		t.Fatalf("%d steps, %d bytes queued, %d dropped; want 1, %d, 1", len(d.f.steps), d.f.queued.Load(), full(), one)
	}
	d.onStep(msg(3, 2)) // 84+96 > 100: dropped
	if len(d.f.steps) != 1 || full() != 2 {
		t.Fatalf("%d steps queued, %d dropped; want 1, 2", len(d.f.steps), full())
	}
	// Dequeuing (as follow does) gives the bytes back; an empty queue
	// takes a step larger than the limit.
	m := <-d.f.steps
	d.f.queued.Add(-int64(len(m.data)))
	d.onStep(msg(4, 20))
	if len(d.f.steps) != 1 || d.f.queued.Load() != int64(len(msg(4, 20).Data)) || full() != 2 {
		t.Fatalf("%d steps, %d bytes queued, %d dropped after an oversized step into an empty queue", len(d.f.steps), d.f.queued.Load(), full())
	}
}

// gatedExecutor holds every forward pass with rows until open is closed.
type gatedExecutor struct {
	Executor
	open chan struct{}
}

func (g *gatedExecutor) Forward(ctx context.Context, b Batch) ([]float32, error) {
	if len(b.Rows) > 0 {
		select {
		case <-g.open:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return g.Executor.Forward(ctx, b)
}

// TestFollowerStepQueueBytesRecovers: a follower whose step queue is at
// its byte limit drops the next step (step_queue_full), fills the gap by
// replay, and ends in lockstep with rank 0: same step, same digest, and
// the request's tokens are the ones predicted.
func TestFollowerStepQueueBytesRecovers(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	hub := broadcast.NewHub()
	gate := make(chan struct{})
	var ranks []*runningRank
	for r := range 2 {
		cfg := driverConfig(r, 2)
		cfg.Leader = testLeader
		ex, err := NewSynthetic(SyntheticConfig{Vocab: drvVocab, EOS: drvEOS, Logits: r == 0})
		if err != nil {
			t.Fatal(err)
		}
		var e Executor = ex
		if r == 1 {
			// One step of one row is 60 bytes: a second one does not fit.
			cfg.StepQueueBytes = 100
			e = &gatedExecutor{Executor: ex, open: gate}
		}
		ranks = append(ranks, runRank(t, ctx, hub.Connect(), cfg, e))
	}
	requester := hub.Connect()
	t.Cleanup(func() {
		cancel()
		for _, r := range ranks {
			_ = r.wait(t)
		}
		requester.Close()
	})
	poll.Until(t, 10*time.Second, "ranks never became ready", func() bool {
		return ranks[0].d.Status().State != "joining" && ranks[1].d.Status().State != "joining"
	})

	req := &api.GenerateRequest{PromptTokenIDs: []int32{5, 6, 7}, MaxTokens: 24, Params: api.Params{IgnoreEOS: true}}
	type result struct {
		rep *api.GenerateReply
		err error
	}
	done := make(chan result, 1)
	go func() {
		gctx, gcancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer gcancel()
		rep, err := client.Generate(gctx, requester, drvSubj, req, nil)
		done <- result{rep, err}
	}()
	// The follower is held in step 1's forward pass while rank 0 runs up
	// to max-lag steps ahead: the second of those finds the queue full.
	poll.Until(t, 10*time.Second, "no step was dropped at the byte limit", func() bool {
		return ranks[1].d.Status().Rejected["step_queue_full"] > 0
	})
	close(gate)
	res := <-done
	if res.err != nil {
		t.Fatal(res.err)
	}
	want, _ := predict(t, req)
	if !slices.Equal(res.rep.Tokens, want) {
		t.Fatalf("tokens %v, want %v", res.rep.Tokens, want)
	}
	var st0, st1 api.RankStatus
	poll.Until(t, 10*time.Second, "ranks did not agree", func() bool {
		st0, st1 = ranks[0].d.Status(), ranks[1].d.Status()
		return st0.Step > 0 && st0.Step == st1.Step && st0.Digest == st1.Digest
	})
	if st1.Rejected["replayed"] == 0 {
		t.Errorf("follower status %+v: the dropped step was not replayed", st1)
	}
	// Copies of replayed steps may still be queued; once the loop has
	// taken them as duplicates, no bytes stay accounted.
	poll.Until(t, 10*time.Second, "bytes stay accounted to an empty step queue", func() bool {
		return len(ranks[1].d.f.steps) == 0 && ranks[1].d.f.queued.Load() == 0
	})
}

// TestFollowerRejoinsRank0sNewEpoch: a follower that hears its rank 0
// heartbeat from a later epoch (it adopted the epoch rank 0 advertised just
// before rank 0 moved on) stops with an EpochMovedError, a peer loss, so
// its agent follows rank 0 into its epoch at once. A later epoch from another leader, or an
// earlier epoch, does not stop it.
func TestFollowerRejoinsRank0sNewEpoch(t *testing.T) {
	_, r, pub := startWithLeader(t, 1)
	poll.Until(t, 10*time.Second, "follower never became ready", func() bool { return r.d.Status().State == "ready" })
	publishHeartbeat(t, pub, drvSubj.Heartbeat(0), broadcast.Heartbeat{Epoch: 2, Rank: 0, Phase: broadcast.PhaseRunning, Leader: otherLeader})
	publishHeartbeat(t, pub, drvSubj.Heartbeat(0), broadcast.Heartbeat{Epoch: 0, Rank: 0, Phase: broadcast.PhaseRunning, Leader: testLeader})
	// The loop goes on: it applies the next step.
	publishStep(t, pub, &broadcast.Step{Epoch: 1, Step: 1, Leader: testLeader, Admitted: []broadcast.Admission{{Seq: 1, Prompt: []int32{4}}}})
	poll.Until(t, 10*time.Second, "step 1 not applied after another leader's and an earlier epoch's heartbeats", func() bool {
		return r.d.Status().Step == 1
	})
	publishHeartbeat(t, pub, drvSubj.Heartbeat(0), broadcast.Heartbeat{Epoch: 2, Rank: 0, Phase: broadcast.PhaseRunning, Leader: testLeader})
	err := r.wait(t)
	var moved *EpochMovedError
	if !errors.Is(err, ErrPeerLost) || !errors.As(err, &moved) || moved.Epoch != 2 || moved.Was != 1 {
		t.Fatalf("Run = %v, want an EpochMovedError (a peer loss) from epoch 1 to 2", err)
	}
}
