package rank

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/internal/poll"
	"github.com/tpcoord/tpcoord/rank/core"
)

// The keyed tests' job key, and a codec under another key: what a process
// holding the job's NATS credentials but not its key can produce.
var (
	drvKey      = broadcast.Key("0123456789abcdef0123456789abcdef")
	keyedCodec  = broadcast.NewCodec(broadcast.JobHash(drvJob), drvKey)
	forgerCodec = broadcast.NewCodec(broadcast.JobHash(drvJob), broadcast.Key("fedcba9876543210fedcba9876543210"))
)

// startKeyed starts rank (of 2) with leader testLeader and the key
// drvKey, and a second hub connection for the test. The cleanup stops the
// rank and closes the connection.
func startKeyed(t *testing.T, rank int) (*runningRank, broadcast.Transport) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	hub := broadcast.NewHub()
	cfg := driverConfig(rank, 2)
	cfg.Leader, cfg.Key = testLeader, drvKey
	r := startRank(t, ctx, hub, cfg)
	pub := hub.Connect()
	t.Cleanup(func() { cancel(); _ = r.wait(t); pub.Close() })
	poll.Until(t, 10*time.Second, "the rank never became ready", func() bool { return r.d.Status().State == "ready" })
	return r, pub
}

func publishWith(t *testing.T, tr broadcast.Transport, subject string, data []byte) {
	t.Helper()
	if err := tr.Publish(&broadcast.Msg{Subject: subject, Data: data}); err != nil {
		t.Fatal(err)
	}
}

// countMessages counts the messages published on subject.
func countMessages(t *testing.T, tr broadcast.Transport, subject string) func() int {
	t.Helper()
	var (
		mu sync.Mutex
		n  int
	)
	unsub, err := tr.Subscribe(subject, func(*broadcast.Msg) { mu.Lock(); n++; mu.Unlock() })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unsub() })
	return func() int { mu.Lock(); defer mu.Unlock(); return n }
}

// TestFollowerRefusesForgedStep: a keyed follower refuses, counts as
// "mac" and never applies or queues a step or a rank 0 heartbeat sealed
// with another key or without one, though each carries the right job,
// leader and checksum: none of them makes it ask for a replay either. The
// genuine step 2 is applied after them, and the follower's own
// heartbeats carry the job's MAC.
func TestFollowerRefusesForgedStep(t *testing.T) {
	r, pub := startKeyed(t, 1)
	replays := countMessages(t, pub, drvSubj.Replay())
	var ownErr error
	var mu sync.Mutex
	unsub, err := pub.Subscribe(drvSubj.Heartbeat(1), func(m *broadcast.Msg) {
		var hb broadcast.Heartbeat
		err := keyedCodec.DecodeHeartbeat(m.Data, &hb)
		if err == nil && forgerCodec.DecodeHeartbeat(m.Data, &hb) == nil {
			err = errors.New("the heartbeat also verifies under another key")
		}
		mu.Lock()
		ownErr = errors.Join(ownErr, err)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unsub() })

	step1 := &broadcast.Step{Epoch: 1, Leader: testLeader, Step: 1, Admitted: []broadcast.Admission{{Seq: 1, Prompt: []int32{4}}}}
	publishWith(t, pub, drvSubj.Step(), keyedCodec.AppendStep(nil, step1))
	poll.Until(t, 10*time.Second, "step 1 not applied", func() bool { return r.d.Status().Step == 1 })

	forged := &broadcast.Step{Epoch: 1, Leader: testLeader, Step: 2, Tokens: []broadcast.Token{{Seq: 1, Token: 66}}}
	publishWith(t, pub, drvSubj.Step(), forgerCodec.AppendStep(nil, forged))
	publishWith(t, pub, drvSubj.Step(), drvCodec.AppendStep(nil, forged)) // no key at all
	forged.Step = 3                                                       // would reveal a gap
	publishWith(t, pub, drvSubj.Step(), forgerCodec.AppendStep(nil, forged))
	rank0 := broadcast.Heartbeat{Epoch: 1, Rank: 0, Phase: broadcast.PhaseRunning, Applied: 9, Leader: testLeader}
	for range 2 { // two: the second would make the first's step count
		publishWith(t, pub, drvSubj.Heartbeat(0), forgerCodec.AppendHeartbeat(nil, &rank0))
	}
	poll.Until(t, 10*time.Second, "the forgeries not counted as mac", func() bool { return r.d.Status().Rejected["mac"] == 5 })
	r.d.mu.Lock()
	leaderNow := r.d.f.leaderNow
	r.d.mu.Unlock()
	if st := r.d.Status(); st.Step != 1 || leaderNow != 0 || len(r.d.f.steps) != 0 || replays() != 0 {
		t.Fatalf("after the forgeries: step %d, rank 0 believed at %d, %d queued, %d replay requests", st.Step, leaderNow, len(r.d.f.steps), replays())
	}

	step2 := &broadcast.Step{Epoch: 1, Leader: testLeader, Step: 2, Tokens: []broadcast.Token{{Seq: 1, Token: 7}}}
	publishWith(t, pub, drvSubj.Step(), keyedCodec.AppendStep(nil, step2))
	poll.Until(t, 10*time.Second, "the genuine step 2 not applied", func() bool { return r.d.Status().Step == 2 })
	want := core.NewMirror(1)
	for _, st := range []*broadcast.Step{step1, step2} {
		if err := want.Apply(st); err != nil {
			t.Fatal(err)
		}
	}
	if st := r.d.Status(); st.Digest != digestString(want.Digest()) || st.Rejected["mac"] != 5 || st.Rejected["step"] != 0 {
		t.Fatalf("status %+v: want digest %s, 5 mac refusals and no others", st, digestString(want.Digest()))
	}
	mu.Lock()
	defer mu.Unlock()
	if ownErr != nil {
		t.Fatalf("the follower's own heartbeats: %v", ownErr)
	}
}

// TestLeaderRefusesForgedHeartbeatAndReplay: a keyed rank 0 refuses, as
// "mac", a follower heartbeat sealed with another key (the follower stays
// unheard) and a replay request sealed with another key (no reply); the
// same messages under the job's key are taken and answered, the answer
// sealed with it.
func TestLeaderRefusesForgedHeartbeatAndReplay(t *testing.T) {
	r, pub := startKeyed(t, 0)
	hb := broadcast.Heartbeat{Epoch: 1, Rank: 1, Phase: broadcast.PhaseReady}
	publishWith(t, pub, drvSubj.Heartbeat(1), forgerCodec.AppendHeartbeat(nil, &hb))
	poll.Until(t, 10*time.Second, "the forged heartbeat not counted", func() bool { return r.d.Status().Rejected["mac"] == 1 })
	if p := r.d.Status().Peers[0]; p.State != "unknown" {
		t.Fatalf("rank 1 after a forged heartbeat: %+v, want it unheard", p)
	}
	publishWith(t, pub, drvSubj.Heartbeat(1), keyedCodec.AppendHeartbeat(nil, &hb))
	poll.Until(t, 10*time.Second, "the genuine heartbeat not taken", func() bool { return r.d.Status().Peers[0].State == "ready" })

	req := broadcast.ReplayRequest{Epoch: 1, Rank: 1, From: 1, To: 1}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, err := broadcast.Request(ctx, pub, drvSubj.Replay(), forgerCodec.AppendReplayRequest(nil, &req))
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || r.d.Status().Rejected["mac"] != 2 {
		t.Fatalf("a forged replay request: %v, mac %d; want no reply and 2 refusals", err, r.d.Status().Rejected["mac"])
	}
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	data, err := broadcast.Request(ctx, pub, drvSubj.Replay(), keyedCodec.AppendReplayRequest(nil, &req))
	cancel()
	var rep broadcast.ReplayReply
	if err != nil || keyedCodec.DecodeReplayReply(data, &rep) != nil || rep.Leader != testLeader {
		t.Fatalf("a genuine replay request: %v; reply %+v", err, rep)
	}
	if err := forgerCodec.DecodeReplayReply(data, &rep); !errors.Is(err, broadcast.ErrMAC) {
		t.Fatalf("rank 0's reply under another key: %v, want ErrMAC", err)
	}
}

// TestFollowerRefusesForgedReplayReply: a keyed follower that fills a gap
// refuses replay replies sealed with another key or none, as "mac", asks
// again, and applies only rank 0's genuine reply.
func TestFollowerRefusesForgedReplayReply(t *testing.T) {
	r, pub := startKeyed(t, 1)
	steps := []*broadcast.Step{
		{Epoch: 1, Leader: testLeader, Step: 1, Admitted: []broadcast.Admission{{Seq: 1, Prompt: []int32{4}}}},
		{Epoch: 1, Leader: testLeader, Step: 2, Tokens: []broadcast.Token{{Seq: 1, Token: 9}}},
		{Epoch: 1, Leader: testLeader, Step: 3, Tokens: []broadcast.Token{{Seq: 1, Token: 10}}},
	}
	forged := &broadcast.Step{Epoch: 1, Leader: testLeader, Step: 2, Tokens: []broadcast.Token{{Seq: 1, Token: 66}}}
	var (
		mu       sync.Mutex
		requests int
	)
	unsub, err := pub.Subscribe(drvSubj.Replay(), func(m *broadcast.Msg) {
		var req broadcast.ReplayRequest
		if err := keyedCodec.DecodeReplayRequest(m.Data, &req); err != nil {
			t.Errorf("replay request: %v", err)
			return
		}
		mu.Lock()
		requests++
		n := requests
		mu.Unlock()
		rep := broadcast.ReplayReply{Epoch: 1, Oldest: 1, Leader: testLeader}
		codec := keyedCodec
		switch n {
		case 1: // a forger's reply, its step sealed under its key
			codec, rep.Steps = forgerCodec, [][]byte{forgerCodec.AppendStep(nil, forged)}
		case 2: // a reply without a key carrying the genuine steps
			codec = drvCodec
			fallthrough
		default:
			for k := req.From; k <= req.To; k++ {
				rep.Steps = append(rep.Steps, keyedCodec.AppendStep(nil, steps[k-1]))
			}
		}
		_ = pub.Publish(&broadcast.Msg{Subject: m.Reply, Data: codec.AppendReplayReply(nil, &rep)})
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unsub() })

	publishWith(t, pub, drvSubj.Step(), keyedCodec.AppendStep(nil, steps[0]))
	poll.Until(t, 10*time.Second, "step 1 not applied", func() bool { return r.d.Status().Step == 1 })
	publishWith(t, pub, drvSubj.Step(), keyedCodec.AppendStep(nil, steps[2])) // step 2 lost: a gap
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
	if st.Rejected["mac"] != 2 || n != 3 || st.Digest != digestString(want.Digest()) || st.State != "running" {
		t.Fatalf("status %+v after %d replay requests: want 2 mac refusals after 3 requests, digest %s", st, n, digestString(want.Digest()))
	}
}
