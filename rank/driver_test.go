package rank

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/internal/poll"
	"github.com/tpcoord/tpcoord/rank/client"
	"github.com/tpcoord/tpcoord/rank/core"
)

const (
	drvVocab = 512
	drvEOS   = 1
	drvJob   = "drv"
)

var (
	drvSubj  = broadcast.Subjects{Prefix: "tpc", Job: drvJob}
	drvCodec = broadcast.NewCodec(broadcast.JobHash(drvJob), nil) // the tests' job has no key
)

func driverConfig(rank, world int) DriverConfig {
	return DriverConfig{
		Job: drvJob, Prefix: "tpc", Rank: rank, World: world, Epoch: 1,
		MaxBatch: 4, MaxQueue: 16, MaxLag: 2, Heartbeat: 20 * time.Millisecond,
		EOS: drvEOS, Version: "test", ReplayTimeout: 50 * time.Millisecond,
	}
}

// runningRank is one driver running in the background.
type runningRank struct {
	d    *Driver
	tr   broadcast.Transport
	done chan error
}

// startRank starts a driver with a Synthetic executor on its own hub
// connection; ctx's cancellation stops it. The test's cleanup waits for it.
func startRank(t *testing.T, ctx context.Context, hub *broadcast.Hub, cfg DriverConfig) *runningRank {
	t.Helper()
	return startRankOn(t, ctx, hub.Connect(), cfg)
}

// startRankOn is startRank over a given transport.
func startRankOn(t *testing.T, ctx context.Context, tr broadcast.Transport, cfg DriverConfig) *runningRank {
	t.Helper()
	ex, err := NewSynthetic(SyntheticConfig{Vocab: drvVocab, EOS: drvEOS, Logits: cfg.Rank == 0 || cfg.FollowerPick != nil})
	if err != nil {
		t.Fatal(err)
	}
	return runRank(t, ctx, tr, cfg, ex)
}

// runRank runs a driver over tr with executor ex until ctx ends; tr is
// closed when the test ends.
func runRank(t *testing.T, ctx context.Context, tr broadcast.Transport, cfg DriverConfig, ex Executor) *runningRank {
	t.Helper()
	return runRankWith(t, ctx, tr, cfg, ex, Greedy{})
}

// runRankWith is runRank with rank 0's picker.
func runRankWith(t *testing.T, ctx context.Context, tr broadcast.Transport, cfg DriverConfig, ex Executor, pick Picker) *runningRank {
	t.Helper()
	r := &runningRank{d: NewDriver(cfg, tr, ex, pick), tr: tr, done: make(chan error, 1)}
	go func() { r.done <- r.d.Run(ctx) }()
	t.Cleanup(tr.Close)
	return r
}

// wait returns Run's result.
func (r *runningRank) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-r.done:
		r.done <- err // keep it for later callers
		return err
	case <-time.After(30 * time.Second):
		t.Fatalf("rank %d: Run did not return", r.d.cfg.Rank)
		return nil
	}
}

// cluster is rank 0 and its followers on one in-memory hub.
type cluster struct {
	hub       *broadcast.Hub
	requester broadcast.Transport
	ranks     []*runningRank
	cancel    context.CancelFunc
}

func startCluster(t *testing.T, world int) *cluster {
	t.Helper()
	return startClusterWith(t, world, nil)
}

// startClusterWith starts a cluster whose rank r talks through
// wrap(r, conn) when wrap is not nil.
func startClusterWith(t *testing.T, world int, wrap func(rank int, tr broadcast.Transport) broadcast.Transport) *cluster {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c := &cluster{hub: broadcast.NewHub(), cancel: cancel}
	c.requester = c.hub.Connect()
	t.Cleanup(c.requester.Close)
	for r := range world {
		tr := c.hub.Connect()
		if wrap != nil {
			tr = wrap(r, tr)
		}
		c.ranks = append(c.ranks, startRankOn(t, ctx, tr, driverConfig(r, world)))
	}
	t.Cleanup(func() {
		cancel()
		for _, r := range c.ranks {
			_ = r.wait(t)
		}
	})
	// Every rank answers status once it has subscribed.
	waitServing(t, c.requester, world)
	return c
}

func (c *cluster) status(t *testing.T) []api.RankStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := client.CollectStatus(ctx, c.requester, drvSubj, 100*time.Millisecond)
	if err != nil {
		t.Fatalf("client.CollectStatus: %v", err)
	}
	return st
}

// predict decodes req greedily with the rules of the scheduler, using a
// Synthetic executor of the same configuration: rows are independent of
// the batch, so this is exactly what the cluster must produce.
func predict(t *testing.T, req *api.GenerateRequest) ([]int32, string) {
	t.Helper()
	ex, err := NewSynthetic(SyntheticConfig{Vocab: drvVocab, EOS: drvEOS, Logits: true})
	if err != nil {
		t.Fatal(err)
	}
	row := make([]float32, drvVocab)
	s := &Seq{Prompt: req.PromptTokenIDs}
	for {
		ex.Row(s, row)
		tok := argmax(row)
		s.Output = append(s.Output, tok)
		stop := (tok == drvEOS && !req.IgnoreEOS) || slices.Contains(req.StopTokenIDs, tok)
		switch {
		case stop && len(s.Output) >= req.MinTokens:
			return s.Output, api.FinishStop
		case len(s.Output) >= req.MaxTokens:
			return s.Output, api.FinishLength
		}
	}
}

func TestDriverCluster(t *testing.T) {
	c := startCluster(t, 3)
	runRequests(t, c)
	c.cancel()
	for i, r := range c.ranks {
		if err := r.wait(t); err != nil {
			t.Errorf("rank %d: Run returned %v after cancel, want nil", i, err)
		}
	}
}

// TestDriverClusterLossyFollowers: followers whose step subscription drops,
// duplicates and reorders messages (core NATS is at-most-once) recover the
// missing steps by replay and stay in lockstep.
func TestDriverClusterLossyFollowers(t *testing.T) {
	var faulty []*broadcast.Faulty
	c := startClusterWith(t, 3, func(rank int, tr broadcast.Transport) broadcast.Transport {
		if rank == 0 {
			return tr
		}
		f := broadcast.NewFaulty(tr, broadcast.Faults{Drop: 0.1, Duplicate: 0.1, Reorder: 0.1, Subjects: []string{drvSubj.Step()}}, uint64(rank))
		faulty = append(faulty, f)
		return f
	})
	runRequests(t, c)
	injected := 0
	for _, f := range faulty {
		n := f.Counts()
		injected += n.Dropped + n.Duplicated + n.Reordered
	}
	if injected == 0 {
		t.Fatal("no faults were injected; the test proves nothing")
	}
	c.cancel()
	for i, r := range c.ranks {
		if err := r.wait(t); err != nil {
			t.Errorf("rank %d: Run returned %v after cancel, want nil", i, err)
		}
	}
}

// runRequests submits a mix of concurrent requests, checks every outcome
// against predict, and waits until all ranks agree on step and digest.
func runRequests(t *testing.T, c *cluster) {
	t.Helper()
	reqs := mixedRequests(t)
	outcomes := generateAll(t, c, reqs)

	reasons := map[string]int{}
	for i, req := range reqs {
		o := outcomes[i]
		if o.err != nil {
			t.Fatalf("request %d: %v", i, o.err)
		}
		wantTokens, wantFinish := predict(t, req)
		if o.reply.FinishReason != wantFinish || !slices.Equal(o.reply.Tokens, wantTokens) {
			t.Errorf("request %d: %s after %v, want %s after %v", i, o.reply.FinishReason, o.reply.Tokens, wantFinish, wantTokens)
		}
		if !slices.Equal(o.streamed, o.reply.Tokens) {
			t.Errorf("request %d: streamed %v, final reply says %v", i, o.streamed, o.reply.Tokens)
		}
		if !o.reply.Done || o.reply.Error != "" || o.reply.Timings == nil {
			t.Errorf("request %d: final reply %+v", i, o.reply)
		}
		reasons[o.reply.FinishReason]++
	}
	if reasons[api.FinishStop] == 0 || reasons[api.FinishLength] == 0 {
		t.Errorf("finish reasons %v: the scenario should cover both", reasons)
	}
	if n := len(outcomes[2].reply.Tokens); n != 60 {
		t.Errorf("ignore_eos request produced %d tokens, want 60", n)
	}
	if got := outcomes[5].reply.Tokens; len(got) != 3 || outcomes[5].reply.FinishReason != api.FinishStop {
		t.Errorf("stop-token request: %s after %v", outcomes[5].reply.FinishReason, got)
	}
	waitRanksAgree(t, c)
}

// mixedRequests returns requests that between them finish by length, EOS,
// a held-back EOS and a stop token (request 5's third token, from predict).
func mixedRequests(t *testing.T) []*api.GenerateRequest {
	t.Helper()
	reqs := []*api.GenerateRequest{
		{PromptTokenIDs: []int32{5, 6, 7}, MaxTokens: 4},                                           // length
		{PromptTokenIDs: []int32{8}, MaxTokens: 200},                                               // EOS
		{PromptTokenIDs: []int32{9, 10}, MaxTokens: 60, Params: api.Params{IgnoreEOS: true}},       // length past EOS
		{PromptTokenIDs: []int32{11}, MaxTokens: 200, Params: api.Params{MinTokens: 50}},           // EOS held back
		{PromptTokenIDs: []int32{12, 13, 14, 15}, MaxTokens: 1},                                    // one token
		{PromptTokenIDs: []int32{16}, MaxTokens: 200},                                              // stop token, set below
		{PromptTokenIDs: []int32{17, 3}, MaxTokens: 30, Params: api.Params{Temperature: 0}},        // length or EOS
		{PromptTokenIDs: []int32{200, 300, 400, 500}, MaxTokens: 100, Params: api.Params{TopK: 5}}, // EOS
	}
	// A stop token that the request meets before EOS: its third token.
	first, _ := predict(t, reqs[5])
	reqs[5].StopTokenIDs = []int32{first[2]}
	return reqs
}

// outcome is one request's final reply, the tokens streamed before it, or
// its error.
type outcome struct {
	reply    *api.GenerateReply
	streamed []int32
	err      error
}

// generateAll runs reqs concurrently, each over its own hub connection, and
// returns their outcomes in order; it checks the streamed token indexes.
func generateAll(t *testing.T, c *cluster, reqs []*api.GenerateRequest) []outcome {
	t.Helper()
	outcomes := make([]outcome, len(reqs))
	var wg sync.WaitGroup
	for i, req := range reqs {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			tr := c.hub.Connect()
			defer tr.Close()
			var streamed []int32
			rep, err := client.Generate(ctx, tr, drvSubj, req, func(index int, token int32) {
				if index != len(streamed) {
					t.Errorf("request %d: token index %d, want %d", i, index, len(streamed))
				}
				streamed = append(streamed, token)
			})
			outcomes[i] = outcome{rep, streamed, err}
		})
	}
	wg.Wait()
	return outcomes
}

// waitRanksAgree waits until the cluster's three ranks are idle at the
// same step and digest, then checks what each says about itself.
func waitRanksAgree(t *testing.T, c *cluster) {
	t.Helper()
	var last []api.RankStatus
	poll.Until(t, 10*time.Second, "ranks did not agree", func() bool {
		last = c.status(t)
		if len(last) != 3 {
			return false
		}
		for _, s := range last {
			if s.Step == 0 || s.Step != last[0].Step || s.Digest != last[0].Digest || s.Rows != 0 {
				return false
			}
		}
		return true
	})
	for i, s := range last {
		if s.Rank != i || s.World != 3 || s.Job != drvJob || s.Epoch != 1 || s.State != "running" {
			t.Errorf("status of rank %d: %+v", i, s)
		}
	}
}

func TestDriverInvalidRequests(t *testing.T) {
	c := startCluster(t, 1)
	for _, tc := range []struct {
		req   api.GenerateRequest
		field string
	}{
		{api.GenerateRequest{PromptTokenIDs: []int32{1}, MaxTokens: 0}, "max_tokens"},
		{api.GenerateRequest{PromptTokenIDs: []int32{1}, MaxTokens: -3}, "max_tokens"},
		{api.GenerateRequest{MaxTokens: 5}, "prompt_token_ids"},
		{api.GenerateRequest{PromptTokenIDs: []int32{1, drvVocab}, MaxTokens: 5}, "prompt_token_ids[1]"},
		{api.GenerateRequest{PromptTokenIDs: []int32{-1}, MaxTokens: 5}, "prompt_token_ids[0]"},
		{api.GenerateRequest{PromptTokenIDs: []int32{1}, MaxTokens: 5, Params: api.Params{Temperature: -1}}, "temperature"},
		{api.GenerateRequest{PromptTokenIDs: []int32{1}, MaxTokens: 5, Params: api.Params{TopK: drvVocab + 1}}, "top_k"},
		{api.GenerateRequest{PromptTokenIDs: []int32{1}, MaxTokens: 5, Params: api.Params{MinTokens: -1}}, "min_tokens"},
	} {
		t.Run(tc.field, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			rep, err := client.Generate(ctx, c.requester, drvSubj, &tc.req, nil)
			if err == nil {
				t.Fatalf("invalid request accepted: %+v", rep)
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("error %q does not name %s", err, tc.field)
			}
			if rep == nil || rep.FinishReason != api.FinishError || !rep.Done {
				t.Fatalf("reply %+v", rep)
			}
		})
	}
	// Malformed JSON, sent by hand.
	reply := subscribeReplies(t, c.requester)
	if err := c.requester.Publish(&broadcast.Msg{Subject: drvSubj.Generate(), Reply: reply.inbox, Data: []byte("{not json")}); err != nil {
		t.Fatal(err)
	}
	if r := reply.next(t); !r.Done || r.FinishReason != api.FinishError || !strings.Contains(r.Error, "JSON") {
		t.Fatalf("reply to malformed JSON: %+v", r)
	}
	// The cluster still serves valid requests.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := client.Generate(ctx, c.requester, drvSubj, &api.GenerateRequest{PromptTokenIDs: []int32{1}, MaxTokens: 2}, nil); err != nil {
		t.Fatalf("valid request after invalid ones: %v", err)
	}
}

// replies collects the generate replies sent to one inbox.
type replies struct {
	inbox string
	ch    chan api.GenerateReply
}

func subscribeReplies(t *testing.T, tr broadcast.Transport) *replies {
	t.Helper()
	r := &replies{inbox: tr.NewInbox(), ch: make(chan api.GenerateReply, 64)}
	unsub, err := tr.Subscribe(r.inbox, func(m *broadcast.Msg) {
		var rep api.GenerateReply
		if err := json.Unmarshal(m.Data, &rep); err != nil {
			t.Errorf("malformed reply %q", m.Data)
			return
		}
		r.ch <- rep
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unsub() })
	return r
}

func (r *replies) next(t *testing.T) api.GenerateReply {
	t.Helper()
	select {
	case rep := <-r.ch:
		return rep
	case <-time.After(10 * time.Second):
		t.Fatal("no reply")
		return api.GenerateReply{}
	}
}

// lone starts a single follower (rank 1 of 2) with no rank 0, and waits
// until it listens for steps.
func lone(t *testing.T) (*runningRank, broadcast.Transport, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	hub := broadcast.NewHub()
	r := startRank(t, ctx, hub, driverConfig(1, 2))
	pub := hub.Connect()
	t.Cleanup(func() {
		cancel()
		_ = r.wait(t)
		pub.Close()
	})
	poll.Until(t, 10*time.Second, "follower never became ready", func() bool {
		return r.d.Status().State == "ready"
	})
	return r, pub, cancel
}

func publishStep(t *testing.T, tr broadcast.Transport, st *broadcast.Step) {
	t.Helper()
	data := drvCodec.AppendStep(nil, st)
	if err := tr.Publish(&broadcast.Msg{Subject: drvSubj.Step(), Data: data}); err != nil {
		t.Fatal(err)
	}
}

func TestDriverFollowerGapAborts(t *testing.T) {
	r, pub, _ := lone(t)
	publishStep(t, pub, &broadcast.Step{Epoch: 1, Step: 1, Admitted: []broadcast.Admission{{Seq: 1, Prompt: []int32{4}}}})
	poll.Until(t, 10*time.Second, "step 1 not applied", func() bool { return r.d.Status().Step == 1 })
	// Step 2 never comes; nobody can replay it.
	publishStep(t, pub, &broadcast.Step{Epoch: 1, Step: 3, Tokens: []broadcast.Token{{Seq: 1, Token: 9}}})
	err := r.wait(t)
	if !errors.Is(err, ErrAborted) {
		t.Fatalf("Run = %v, want an error wrapping ErrAborted", err)
	}
	if st := r.d.Status(); st.Step != 1 || st.State != "aborted" {
		t.Fatalf("status after the abort: %+v", st)
	}
}

// TestDriverFollowerNotInEpoch: a follower that has applied nothing and
// meets rank 0 far into the epoch, beyond its replay window (a restarted
// process that adopted an epoch formed with its predecessor), is not in
// that epoch: it stops with ErrPeerLost, so the agent waits for the next
// epoch, not ErrAborted, which would end the process.
func TestDriverFollowerNotInEpoch(t *testing.T) {
	r, pub, _ := lone(t)
	window := broadcast.NewWindow(4, 0)
	for k := uint64(1); k <= 40; k++ {
		window.Add(1, k, drvCodec.AppendStep(nil, &broadcast.Step{Epoch: 1, Step: k}))
	}
	if _, err := pub.Subscribe(drvSubj.Replay(), func(m *broadcast.Msg) {
		var req broadcast.ReplayRequest
		if err := drvCodec.DecodeReplayRequest(m.Data, &req); err != nil {
			t.Errorf("replay request: %v", err)
			return
		}
		_ = pub.Publish(&broadcast.Msg{Subject: m.Reply, Data: drvCodec.AppendReplayReply(nil, window.Serve(&req, 1<<20))})
	}); err != nil {
		t.Fatal(err)
	}
	publishStep(t, pub, &broadcast.Step{Epoch: 1, Step: 41})
	err := r.wait(t)
	if !errors.Is(err, ErrPeerLost) || errors.Is(err, ErrAborted) || !strings.Contains(err.Error(), "another member for rank") {
		t.Fatalf("Run = %v, want ErrPeerLost saying rank 0 formed the epoch with another member", err)
	}
}

// deliverySpy calls on with every message delivered to a subscription of
// the connection it wraps, before the subscriber sees it. Set on before
// traffic starts.
type deliverySpy struct {
	broadcast.Transport
	on func(*broadcast.Msg)
}

func (s *deliverySpy) Subscribe(subject string, fn func(*broadcast.Msg)) (func() error, error) {
	return s.Transport.Subscribe(subject, func(m *broadcast.Msg) {
		if s.on != nil {
			s.on(m)
		}
		fn(m)
	})
}

// TestDriverFollowerReplayWaitsForRank0: a follower that finds a gap while
// rank 0 is briefly off the bus (resubscribing after a NATS server restart)
// gets "no responders" at once; it pauses between attempts (100, 200, 400,
// 800 ms, each at most ReplayTimeout) instead of spending them all in that
// moment, and catches up when rank 0 answers again. Rank 0 comes back when
// the third request has met nobody, so the fourth finds it. The pauses are
// checked from below only (a timer never fires early).
func TestDriverFollowerReplayWaitsForRank0(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hub := broadcast.NewHub()
	pub := hub.Connect()
	defer pub.Close()
	window := broadcast.NewWindow(8, 0)
	steps := []*broadcast.Step{
		{Epoch: 1, Step: 1, Admitted: []broadcast.Admission{{Seq: 1, Prompt: []int32{4}}}},
		{Epoch: 1, Step: 2, Tokens: []broadcast.Token{{Seq: 1, Token: 7}}},
		{Epoch: 1, Step: 3, Tokens: []broadcast.Token{{Seq: 1, Token: 9}}},
	}
	for _, st := range steps {
		window.Add(1, st.Step, drvCodec.AppendStep(nil, st))
	}
	serveReplay := func(m *broadcast.Msg) {
		var req broadcast.ReplayRequest
		if err := drvCodec.DecodeReplayRequest(m.Data, &req); err != nil {
			t.Errorf("replay request: %v", err)
			return
		}
		_ = pub.Publish(&broadcast.Msg{Subject: m.Reply, Data: drvCodec.AppendReplayReply(nil, window.Serve(&req, 1<<20))})
	}
	// The follower's own connection reports every "no responders" it gets
	// (NATS sends them to the requester alone). The hub calls it outside
	// its lock, in the follower's goroutine, so rank 0 can subscribe there.
	var (
		mu      sync.Mutex
		refused []time.Time
	)
	refusals := &deliverySpy{Transport: hub.Connect(), on: func(m *broadcast.Msg) {
		if !broadcast.IsNoResponders(m) {
			return
		}
		mu.Lock()
		refused = append(refused, time.Now())
		n := len(refused)
		mu.Unlock()
		if n == 3 {
			if _, err := pub.Subscribe(drvSubj.Replay(), serveReplay); err != nil {
				t.Errorf("subscribe replay: %v", err)
			}
		}
	}}
	cfg := driverConfig(1, 2)
	cfg.ReplayTimeout = time.Second
	r := startRankOn(t, ctx, refusals, cfg)
	poll.Until(t, 10*time.Second, "follower never became ready", func() bool { return r.d.Status().State == "ready" })

	publishStep(t, pub, steps[0])
	poll.Until(t, 10*time.Second, "step 1 not applied", func() bool { return r.d.Status().Step == 1 })
	publishStep(t, pub, steps[2]) // step 2 is lost on the way
	poll.Until(t, 30*time.Second, "the follower never caught up to step 3", func() bool {
		st := r.d.Status()
		if st.State == "aborted" {
			t.Fatalf("the follower aborted: %+v", st)
		}
		return st.Step == 3
	})
	mu.Lock()
	defer mu.Unlock()
	if len(refused) != 3 {
		t.Fatalf("%d replay requests met nobody, want 3", len(refused))
	}
	for i, want := range []time.Duration{100 * time.Millisecond, 200 * time.Millisecond} {
		if gap := refused[i+1].Sub(refused[i]); gap < want {
			t.Errorf("pause before attempt %d: %v, want at least %v", i+2, gap, want)
		}
	}
}

func TestDriverFollowerDivergenceAborts(t *testing.T) {
	r, pub, _ := lone(t)
	publishStep(t, pub, &broadcast.Step{Epoch: 1, Step: 1, Admitted: []broadcast.Admission{{Seq: 1, Prompt: []int32{4}}}})
	// Step 2 has no token for the one row.
	publishStep(t, pub, &broadcast.Step{Epoch: 1, Step: 2})
	if err := r.wait(t); !errors.Is(err, ErrAborted) || !errors.Is(err, core.ErrDiverged) {
		t.Fatalf("Run = %v, want ErrAborted wrapping core.ErrDiverged", err)
	}
}

func TestDriverFollowerIgnoresNoise(t *testing.T) {
	r, pub, cancel := lone(t)
	publishStep(t, pub, &broadcast.Step{Epoch: 1, Step: 1})
	// A duplicate, a stale epoch, another job's step and garbage are all
	// refused without stopping the loop.
	publishStep(t, pub, &broadcast.Step{Epoch: 1, Step: 1})
	publishStep(t, pub, &broadcast.Step{Epoch: 0, Step: 7})
	publishStep(t, pub, &broadcast.Step{Epoch: 2, Step: 2})
	other := broadcast.NewCodec(broadcast.JobHash("other"), nil).AppendStep(nil, &broadcast.Step{Epoch: 1, Step: 2})
	_ = pub.Publish(&broadcast.Msg{Subject: drvSubj.Step(), Data: other})
	_ = pub.Publish(&broadcast.Msg{Subject: drvSubj.Step(), Data: []byte("garbage")})
	_ = pub.Publish(&broadcast.Msg{Subject: drvSubj.Control(), Data: []byte("{")})
	publishStep(t, pub, &broadcast.Step{Epoch: 1, Step: 2})
	poll.Until(t, 10*time.Second, "step 2 not applied", func() bool { return r.d.Status().Step == 2 })
	cancel()
	if err := r.wait(t); err != nil {
		t.Fatalf("Run = %v after cancel, want nil", err)
	}
}

func TestDriverFollowerControlAbort(t *testing.T) {
	r, pub, _ := lone(t)
	data, _ := json.Marshal(api.Control{Kind: api.ControlAbort, Reason: "test says so"})
	if err := pub.Publish(&broadcast.Msg{Subject: drvSubj.Control(), Data: data}); err != nil {
		t.Fatal(err)
	}
	err := r.wait(t)
	if !errors.Is(err, ErrAborted) || !strings.Contains(err.Error(), "test says so") {
		t.Fatalf("Run = %v, want ErrAborted with rank 0's reason", err)
	}
}

// TestDriverLeaderStops: rank 0 waiting for a follower that never comes
// stops cleanly on cancel, and on Abort with the abort's error; either way
// the requests it holds get an error reply.
func TestDriverLeaderStops(t *testing.T) {
	for _, abort := range []bool{false, true} {
		t.Run(fmt.Sprintf("abort=%v", abort), func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			hub := broadcast.NewHub()
			r := startRank(t, ctx, hub, driverConfig(0, 2))
			requester := hub.Connect()
			defer requester.Close()
			poll.Until(t, 10*time.Second, "rank 0 never became ready", func() bool { return r.d.Status().State == "ready" })
			reply := subscribeReplies(t, requester)
			data, _ := json.Marshal(api.GenerateRequest{PromptTokenIDs: []int32{1}, MaxTokens: 3})
			if err := requester.Publish(&broadcast.Msg{Subject: drvSubj.Generate(), Reply: reply.inbox, Data: data}); err != nil {
				t.Fatal(err)
			}
			var control []byte
			unsub, _ := requester.Subscribe(drvSubj.Control(), func(m *broadcast.Msg) { control = append(control, m.Data...) })
			defer func() { _ = unsub() }()
			lost := fmt.Errorf("%w: rank 1 failed", ErrPeerLost)
			if abort {
				r.d.Abort(lost)
			} else {
				cancel()
			}
			err := r.wait(t)
			switch {
			case abort && !errors.Is(err, ErrPeerLost):
				t.Fatalf("Run = %v, want the abort's error", err)
			case !abort && err != nil:
				t.Fatalf("Run = %v after cancel, want nil", err)
			}
			rep := reply.next(t)
			if !rep.Done || rep.FinishReason != api.FinishError || rep.Error == "" {
				t.Fatalf("reply to the pending request: %+v", rep)
			}
			if abort && !strings.Contains(rep.Error, "rank 1 failed") {
				t.Fatalf("reply %q does not carry the abort's reason", rep.Error)
			}
			// A peer loss is announced as such, so followers stop for the
			// same reason (and, under the wait policy, wait to re-form).
			if abort != strings.Contains(string(control), `"kind":"peer_lost","reason":"peer lost: rank 1 failed"`) {
				t.Fatalf("control messages %q (abort=%v)", control, abort)
			}
		})
	}
}

// TestDriverOverload: requests beyond MaxQueue are refused with an error
// reply rather than queued without bound.
func TestDriverOverload(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hub := broadcast.NewHub()
	cfg := driverConfig(0, 2) // no follower: nothing runs, everything waits
	cfg.MaxQueue, cfg.MaxBatch = 2, 1
	r := startRank(t, ctx, hub, cfg)
	requester := hub.Connect()
	defer requester.Close()
	poll.Until(t, 10*time.Second, "rank 0 never became ready", func() bool { return r.d.Status().State == "ready" })
	reply := subscribeReplies(t, requester)
	data, _ := json.Marshal(api.GenerateRequest{PromptTokenIDs: []int32{1}, MaxTokens: 3})
	const n = 8
	for range n {
		if err := requester.Publish(&broadcast.Msg{Subject: drvSubj.Generate(), Reply: reply.inbox, Data: data}); err != nil {
			t.Fatal(err)
		}
	}
	// At most MaxBatch+2·MaxQueue can be held (batch, scheduler queue,
	// intake); the rest are refused at once.
	refused := 0
	for refused < n-(cfg.MaxBatch+2*cfg.MaxQueue) {
		rep := reply.next(t)
		if !rep.Done || !regexp.MustCompile(`^overloaded: request queue is full \(\d+ waiting\); retry later$`).MatchString(rep.Error) {
			t.Fatalf("reply %+v, want an overload refusal in the one wording", rep)
		}
		refused++
	}
	cancel()
	if err := r.wait(t); err != nil {
		t.Fatalf("Run = %v", err)
	}
	for range n - refused {
		if rep := reply.next(t); !rep.Done || rep.FinishReason != api.FinishError {
			t.Fatalf("reply at shutdown %+v", rep)
		}
	}
}

// TestDriverLeaderStopsWhileBusy: with no follower to wait for and a
// request that would run for a million steps, cancel and Abort still stop
// rank 0 at a step boundary.
func TestDriverLeaderStopsWhileBusy(t *testing.T) {
	for _, abort := range []bool{false, true} {
		t.Run(fmt.Sprintf("abort=%v", abort), func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			hub := broadcast.NewHub()
			r := startRank(t, ctx, hub, driverConfig(0, 1))
			requester := hub.Connect()
			defer requester.Close()
			poll.Until(t, 10*time.Second, "rank 0 never became ready", func() bool { return r.d.Status().State == "ready" })
			req := &api.GenerateRequest{PromptTokenIDs: []int32{1}, MaxTokens: 100_000, Params: api.Params{IgnoreEOS: true}}
			started := make(chan struct{})
			var once sync.Once
			result := make(chan error, 1)
			go func() {
				gctx, gcancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer gcancel()
				_, err := client.Generate(gctx, requester, drvSubj, req, func(int, int32) { once.Do(func() { close(started) }) })
				result <- err
			}()
			select {
			case <-started:
			case <-time.After(10 * time.Second):
				t.Fatal("no token streamed")
			}
			if abort {
				r.d.Abort(fmt.Errorf("%w: test", ErrPeerLost))
			} else {
				cancel()
			}
			err := r.wait(t)
			if abort != errors.Is(err, ErrPeerLost) || !abort && err != nil {
				t.Fatalf("Run = %v (abort=%v)", err, abort)
			}
			if err := <-result; err == nil {
				t.Fatal("the interrupted request reported success")
			}
		})
	}
}

// stepCounter counts the step messages published through it.
type stepCounter struct {
	broadcast.Transport
	steps atomic.Int64
}

func (s *stepCounter) Publish(m *broadcast.Msg) error {
	if m.Subject == drvSubj.Step() {
		s.steps.Add(1)
	}
	return s.Transport.Publish(m)
}

// TestDriverStepsTransport: with DriverConfig.Steps, rank 0 publishes every
// step message there and none on its main transport, and the cluster
// decodes as usual.
func TestDriverStepsTransport(t *testing.T) {
	hub := broadcast.NewHub()
	main, steps := &stepCounter{Transport: hub.Connect()}, &stepCounter{Transport: hub.Connect()}
	t.Cleanup(steps.Close)
	ranks, req, rep, err := generateWithSteps(t, hub, main, steps)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := predict(t, req)
	if !slices.Equal(rep.Tokens, want) {
		t.Fatalf("tokens %v, want %v", rep.Tokens, want)
	}
	poll.Until(t, 10*time.Second, "follower never caught up", func() bool {
		s0, s1 := ranks[0].d.Status(), ranks[1].d.Status()
		return s1.Step == s0.Step && s1.Digest == s0.Digest
	})
	if n := steps.steps.Load(); n < int64(len(want)) {
		t.Errorf("%d steps on the steps transport, want at least %d", n, len(want))
	}
	if n := main.steps.Load(); n != 0 {
		t.Errorf("%d steps on the main transport, want 0", n)
	}
}

// generateWithSteps starts rank 0 on main with its steps published on
// steps, and rank 1 on hub; once both are ready it runs one greedy request
// of 12 tokens and returns the ranks, the request and Generate's result.
func generateWithSteps(t *testing.T, hub *broadcast.Hub, main, steps broadcast.Transport) ([]*runningRank, *api.GenerateRequest, *api.GenerateReply, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	requester := hub.Connect()
	t.Cleanup(requester.Close)
	cfg0 := driverConfig(0, 2)
	cfg0.Steps = steps
	ranks := []*runningRank{startRankOn(t, ctx, main, cfg0), startRank(t, ctx, hub, driverConfig(1, 2))}
	t.Cleanup(func() {
		cancel()
		for _, r := range ranks {
			_ = r.wait(t)
		}
	})
	poll.Until(t, 10*time.Second, "ranks never became ready", func() bool {
		return ranks[0].d.Status().State != "joining" && ranks[1].d.Status().State != "joining"
	})
	req := &api.GenerateRequest{PromptTokenIDs: []int32{3, 1, 4}, MaxTokens: 12, Params: api.Params{IgnoreEOS: true}}
	gctx, gcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer gcancel()
	rep, err := client.Generate(gctx, requester, drvSubj, req, nil)
	return ranks, req, rep, err
}

// lossyPublisher fails the step publishes whose ordinal (from 1) is in
// fail with err, sending nothing, as nats.go does when it writes to a
// socket that has just been reset.
type lossyPublisher struct {
	broadcast.Transport
	fail func(n int64) bool
	err  error
	n    atomic.Int64
}

func (s *lossyPublisher) Publish(m *broadcast.Msg) error {
	if m.Subject == drvSubj.Step() && s.fail(s.n.Add(1)) {
		return s.err
	}
	return s.Transport.Publish(m)
}

// TestDriverStepNotSent: a step whose publish fails with
// broadcast.ErrNotSent (the connection is recovering) does not stop the
// job: rank 0 counts it and goes on, the follower replays it and ends at
// rank 0's step and digest, and the request's tokens are the usual ones.
// From the third step on, no step is sent at all: no later step reveals
// the gap, and the follower learns of the steps from rank 0's heartbeats.
// Any other publish error aborts.
func TestDriverStepNotSent(t *testing.T) {
	notSent := fmt.Errorf("%w: write: connection reset by peer", broadcast.ErrNotSent)
	for _, tc := range []struct {
		name string
		err  error
		fail func(n int64) bool
	}{
		{"two steps", notSent, func(n int64) bool { return n == 3 || n == 5 }},
		{"every step from the third", notSent, func(n int64) bool { return n >= 3 }},
		{"not transient", errors.New("nats: maximum payload exceeded"), func(n int64) bool { return n == 3 }},
	} {
		t.Run(tc.name, func(t *testing.T) { testStepNotSent(t, tc.err, tc.fail) })
	}
}

func testStepNotSent(t *testing.T, pubErr error, fail func(int64) bool) {
	transient := errors.Is(pubErr, broadcast.ErrNotSent)
	hub := broadcast.NewHub()
	lossy := &lossyPublisher{Transport: hub.Connect(), fail: fail, err: pubErr}
	t.Cleanup(lossy.Close)
	ranks, req, rep, err := generateWithSteps(t, hub, hub.Connect(), lossy)
	if !transient {
		if err == nil {
			t.Fatalf("the request completed although rank 0 could not publish a step")
		}
		if err := ranks[0].wait(t); !errors.Is(err, ErrAborted) || !strings.Contains(err.Error(), "publish step") {
			t.Fatalf("rank 0 Run = %v, want an abort naming the step publish", err)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := predict(t, req); !slices.Equal(rep.Tokens, want) {
		t.Fatalf("tokens %v, want %v", rep.Tokens, want)
	}
	poll.Until(t, 10*time.Second, "follower never caught up", func() bool {
		s0, s1 := ranks[0].d.Status(), ranks[1].d.Status()
		return s1.Step == s0.Step && s1.Digest == s0.Digest
	})
	unsent := uint64(0)
	for n := int64(1); n <= lossy.n.Load(); n++ {
		if fail(n) {
			unsent++
		}
	}
	if n := ranks[0].d.Status().Rejected["step_unsent"]; n != unsent || n == 0 {
		t.Errorf("rank 0 counts %d unsent steps, want %d (of %d published)", n, unsent, lossy.n.Load())
	}
}

// epochRecorder records the epoch and step of every batch its executor runs.
type epochRecorder struct {
	Executor
	mu      sync.Mutex
	batches [][2]uint64 // epoch, step
}

func (e *epochRecorder) Forward(ctx context.Context, b Batch) ([]float32, error) {
	e.mu.Lock()
	e.batches = append(e.batches, [2]uint64{uint64(b.Epoch), b.Step})
	e.mu.Unlock()
	return e.Executor.Forward(ctx, b)
}

// TestDriverBatchEpoch: rank 0's loop and a follower's both hand the
// executor the epoch they run in (a stateful executor starts over when it
// changes), with the step numbers of that epoch.
func TestDriverBatchEpoch(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	hub := broadcast.NewHub()
	var recs []*epochRecorder
	var ranks []*runningRank
	for r := range 2 {
		cfg := driverConfig(r, 2)
		cfg.Epoch = 7
		ex, err := NewSynthetic(SyntheticConfig{Vocab: drvVocab, EOS: drvEOS, Logits: r == 0})
		if err != nil {
			t.Fatal(err)
		}
		rec := &epochRecorder{Executor: ex}
		recs = append(recs, rec)
		ranks = append(ranks, runRank(t, ctx, hub.Connect(), cfg, rec))
	}
	requester := hub.Connect()
	t.Cleanup(func() {
		cancel()
		for _, r := range ranks {
			_ = r.wait(t)
		}
		requester.Close()
	})
	waitServing(t, requester, 2)
	gctx, gcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer gcancel()
	req := &api.GenerateRequest{PromptTokenIDs: []int32{5, 6, 7}, MaxTokens: 6, Params: api.Params{IgnoreEOS: true}}
	if _, err := client.Generate(gctx, requester, drvSubj, req, nil); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "the follower ran no step", func() bool {
		recs[1].mu.Lock()
		defer recs[1].mu.Unlock()
		return len(recs[1].batches) > 0
	})
	for r, rec := range recs {
		rec.mu.Lock()
		for _, b := range rec.batches {
			if b[0] != 7 || b[1] == 0 {
				t.Errorf("rank %d ran epoch %d step %d, want epoch 7 and a step from 1", r, b[0], b[1])
			}
		}
		rec.mu.Unlock()
	}
}

// subscribeLog records the subjects subscribed on the connection it wraps,
// in order.
type subscribeLog struct {
	broadcast.Transport
	mu       sync.Mutex
	subjects []string
}

func (s *subscribeLog) Subscribe(subject string, fn func(*broadcast.Msg)) (func() error, error) {
	s.mu.Lock()
	s.subjects = append(s.subjects, subject)
	s.mu.Unlock()
	return s.Transport.Subscribe(subject, fn)
}

// TestDriverSubscribesStatusLast: a rank that answers status has every
// other subscription live, so a client that saw rank 0 serving is never
// told that no rank 0 serves the job (a test once was, under load).
func TestDriverSubscribesStatusLast(t *testing.T) {
	hub := broadcast.NewHub()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := []*subscribeLog{{Transport: hub.Connect()}, {Transport: hub.Connect()}}
	for r, l := range logs {
		ex, err := NewSynthetic(SyntheticConfig{Vocab: drvVocab, EOS: drvEOS, Logits: r == 0})
		if err != nil {
			t.Fatal(err)
		}
		runRank(t, ctx, l, driverConfig(r, 2), ex)
	}
	waitServing(t, hub.Connect(), 2)
	for r, l := range logs {
		l.mu.Lock()
		subjects := slices.Clone(l.subjects)
		l.mu.Unlock()
		if len(subjects) < 3 || subjects[len(subjects)-1] != drvSubj.Status() {
			t.Errorf("rank %d subscribed %v, want status last", r, subjects)
		}
		if r == 0 && !slices.Contains(subjects, drvSubj.Generate()) {
			t.Errorf("rank 0 subscribed %v, without generate", subjects)
		}
	}
}

// flushUntilDone is a connection whose Flush is still waiting on the
// server when the context ends, as a NATS flush can be.
type flushUntilDone struct{ broadcast.Transport }

func (f flushUntilDone) Flush(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}

// TestDriverStoppedWhileSubscribing: a rank asked to stop while its
// subscriptions are being flushed stops cleanly (an agent sent SIGTERM
// just after its world formed once exited 1).
func TestDriverStoppedWhileSubscribing(t *testing.T) {
	for _, r := range []int{0, 1} {
		ex, err := NewSynthetic(SyntheticConfig{Vocab: drvVocab, EOS: drvEOS, Logits: r == 0})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		rr := runRank(t, ctx, flushUntilDone{broadcast.NewHub().Connect()}, driverConfig(r, 2), ex)
		cancel()
		if err := rr.wait(t); err != nil {
			t.Errorf("rank %d stopped while subscribing: %v, want a clean stop", r, err)
		}
	}
}
