package rank

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

func TestSchedulerCancel(t *testing.T) {
	s := mustScheduler(t, core.SchedulerConfig{MaxBatch: 1, MaxQueue: 8, EOS: -1})
	a := &Request{Prompt: []int32{1}, MaxTokens: 10, Tag: "a"}
	b := &Request{Prompt: []int32{2}, MaxTokens: 10, Tag: "b"}
	for _, r := range []*Request{a, b} {
		if err := s.Submit(r); err != nil {
			t.Fatal(err)
		}
	}
	m := core.NewMirror(0)
	st := s.Next(0, 1) // admits a; b waits
	if err := m.Apply(st); err != nil {
		t.Fatal(err)
	}
	s.Sampled(m.Rows(), []int32{5}, nil)

	if s.Find("a") != a || s.Find("b") != b || s.Find("nobody") != nil {
		t.Fatal("Find does not see the admitted and the waiting request")
	}
	// Cancel the waiting one: it leaves the queue at once.
	why := errors.New("client said so")
	if r := s.Cancel("b", why); r != b || b.Finish != api.FinishCancelled || !errors.Is(b.Err, why) || s.Waiting() != 0 {
		t.Fatalf("cancel waiting: %v %+v waiting=%d", r, b, s.Waiting())
	}
	// Cancel the admitted one: its token and its removal go in the next step.
	if r := s.Cancel("a", why); r != a || a.Finish != api.FinishCancelled {
		t.Fatalf("cancel active: %v %+v", r, a)
	}
	if r := s.Cancel("a", why); r != nil {
		t.Fatalf("second cancel returned %v", r)
	}
	// A finished row stays known until the next step removes it: its final
	// reply may still be on its way (after its logprobs).
	if s.Find("b") != nil || s.Find("a") != a {
		t.Fatal("after the cancels: want b gone and a (finished, not yet removed) still found")
	}
	if r := s.Cancel("nobody", why); r != nil {
		t.Fatalf("cancel of an unknown tag returned %v", r)
	}
	st = s.Next(0, 2)
	if len(st.Tokens) != 1 || st.Tokens[0].Token != 5 || len(st.Removed) != 1 || st.Removed[0] != a.Seq {
		t.Fatalf("step after the cancel: %+v", st)
	}
	if err := m.Apply(st); err != nil || len(m.Rows()) != 0 {
		t.Fatalf("mirror after the cancel: %v, %d rows", err, len(m.Rows()))
	}
	if s.Find("a") != nil {
		t.Fatal("a still found after the step that removed it")
	}
	if !s.Idle() {
		t.Fatal("scheduler not idle")
	}
}

// TestSchedulerTokenBudget: the batch's tokens stay within the budget, the
// head of the queue is not overtaken by a smaller request behind it, and a
// request larger than the budget still runs alone.
func TestSchedulerTokenBudget(t *testing.T) {
	s := mustScheduler(t, core.SchedulerConfig{MaxBatch: 8, MaxQueue: 8, EOS: -1, MaxBatchTokens: 10})
	big := &Request{Prompt: make([]int32, 8), MaxTokens: 1, Tag: "big"}
	huge := &Request{Prompt: make([]int32, 20), MaxTokens: 1, Tag: "huge"}
	small := &Request{Prompt: make([]int32, 1), MaxTokens: 1, Tag: "small"}
	for _, r := range []*Request{big, huge, small} {
		if err := s.Submit(r); err != nil {
			t.Fatal(err)
		}
	}
	m := core.NewMirror(0)
	var order []string
	for k := uint64(1); !s.Idle() && k < 20; k++ {
		st := s.Next(0, k)
		for _, a := range st.Admitted {
			for _, r := range []*Request{big, huge, small} {
				if r.Seq == a.Seq {
					order = append(order, r.Tag)
				}
			}
		}
		if err := m.Apply(st); err != nil {
			t.Fatal(err)
		}
		tokens := 0
		for _, r := range m.Rows() {
			tokens += len(r.Prompt) + len(r.Output)
		}
		if len(m.Rows()) > 1 && tokens > 10 {
			t.Fatalf("step %d: %d tokens in a batch of %d rows, budget 10", k, tokens, len(m.Rows()))
		}
		toks := make([]int32, len(m.Rows()))
		s.Sampled(m.Rows(), toks, nil)
	}
	if want := []string{"big", "huge", "small"}; len(order) != 3 || order[0] != want[0] || order[1] != want[1] || order[2] != want[2] {
		t.Fatalf("admission order %v, want %v", order, want)
	}
}

// TestDriverClientCancelAndTimeout: a client that cancels gets a final
// "cancelled" reply; a client whose keepalives stop has its request
// cancelled after the client timeout; the ranks stay in lockstep.
func TestDriverClientCancelAndTimeout(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	hub := broadcast.NewHub()
	var ranks []*runningRank
	for r := range 2 {
		cfg := driverConfig(r, 2)
		cfg.ClientTimeout = 300 * time.Millisecond
		ranks = append(ranks, startRank(t, ctx, hub, cfg))
	}
	t.Cleanup(func() {
		cancel()
		for _, r := range ranks {
			_ = r.wait(t)
		}
	})
	requester := hub.Connect()
	t.Cleanup(requester.Close)
	poll.Until(t, 10*time.Second, "ranks never became ready", func() bool {
		return ranks[0].d.Status().State != "joining" && ranks[1].d.Status().State != "joining"
	})

	// Cancel through Generate's context.
	gctx, gcancel := context.WithCancel(context.Background())
	got := make(chan int, 64)
	var rep *api.GenerateReply
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		rep, err = client.Generate(gctx, requester, drvSubj, &api.GenerateRequest{PromptTokenIDs: []int32{9}, MaxTokens: 100000, Params: greedyParams()}, func(i int, _ int32) { got <- i })
	}()
	<-got // streaming
	gcancel()
	<-done
	if rep == nil || rep.FinishReason != api.FinishCancelled {
		t.Fatalf("cancelled request: reply %+v, err %v", rep, err)
	}

	// A client that sent one keepalive and went silent.
	reply := subscribeReplies(t, requester)
	data, _ := json.Marshal(api.GenerateRequest{PromptTokenIDs: []int32{4}, MaxTokens: 100000, Params: greedyParams()})
	if err := requester.Publish(&broadcast.Msg{Subject: drvSubj.Generate(), Reply: reply.inbox, Data: data}); err != nil {
		t.Fatal(err)
	}
	ka, _ := json.Marshal(api.Message{Reply: reply.inbox, Op: "keepalive"})
	if err := requester.Publish(&broadcast.Msg{Subject: drvSubj.Client(), Data: ka}); err != nil {
		t.Fatal(err)
	}
	for {
		r := reply.next(t)
		if r.Done {
			if r.FinishReason != api.FinishCancelled {
				t.Fatalf("silent requester's request ended %+v, want cancelled", r)
			}
			break
		}
	}
	// A client that promised keepalives and died before sending one: its
	// timeout runs from submission.
	data, _ = json.Marshal(api.GenerateRequest{PromptTokenIDs: []int32{5}, MaxTokens: 100000, Keepalive: true, Params: greedyParams()})
	if err := requester.Publish(&broadcast.Msg{Subject: drvSubj.Generate(), Reply: reply.inbox, Data: data}); err != nil {
		t.Fatal(err)
	}
	for {
		r := reply.next(t)
		if r.Done {
			if r.FinishReason != api.FinishCancelled || !strings.Contains(r.Error, "client went away") {
				t.Fatalf("request of a client that died at once ended %+v, want cancelled (client went away)", r)
			}
			break
		}
	}
	poll.Until(t, 10*time.Second, "ranks not idle and in lockstep", func() bool {
		a, b := ranks[0].d.Status(), ranks[1].d.Status()
		return a.Rows == 0 && a.Step == b.Step && a.Digest == b.Digest
	})
}

// greedyParams is vLLM's defaults at temperature 0, never stopping at EOS.
func greedyParams() api.Params {
	p := api.DefaultParams()
	p.Temperature, p.IgnoreEOS = 0, true
	return p
}

// TestDriverLogprobs: a request that asks for logprobs gets, for every
// token, its logprob and the top N, after the token itself; a request that
// does not ask gets none.
func TestDriverLogprobs(t *testing.T) {
	c := startCluster(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := greedyParams()
	n := 3
	p.Logprobs = &n
	rep, err := client.Generate(ctx, c.requester, drvSubj, &api.GenerateRequest{PromptTokenIDs: []int32{7, 8}, MaxTokens: 12, Params: p}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.TokenLogprobs) != len(rep.Tokens) {
		t.Fatalf("%d logprobs for %d tokens", len(rep.TokenLogprobs), len(rep.Tokens))
	}
	for i, lp := range rep.TokenLogprobs {
		if lp.Token != rep.Tokens[i] || len(lp.Top) != n || lp.Logprob > 0 {
			t.Fatalf("token %d (%d): logprobs %+v", i, rep.Tokens[i], lp)
		}
		// Greedy: the sampled token is the most likely one.
		if lp.Rank != 1 || lp.Top[0].Token != lp.Token {
			t.Fatalf("token %d: greedy token has rank %d, top %+v", i, lp.Rank, lp.Top)
		}
	}
	rep, err = client.Generate(ctx, c.requester, drvSubj, &api.GenerateRequest{PromptTokenIDs: []int32{7, 8}, MaxTokens: 4, Params: greedyParams()}, nil)
	if err != nil || rep.TokenLogprobs != nil {
		t.Fatalf("request without logprobs: %v, %+v", err, rep.TokenLogprobs)
	}
}

// TestSchedulerResume: requests carried over from an epoch keep their
// sequence IDs and tokens, are admitted first with their output, and new
// sequence IDs do not collide with theirs.
func TestSchedulerResume(t *testing.T) {
	old := mustScheduler(t, core.SchedulerConfig{MaxBatch: 1, MaxQueue: 8, EOS: -1})
	a := &Request{Prompt: []int32{1, 2}, MaxTokens: 10, Tag: "a"}
	b := &Request{Prompt: []int32{3}, MaxTokens: 10, Tag: "b"}
	for _, r := range []*Request{a, b} {
		if err := old.Submit(r); err != nil {
			t.Fatal(err)
		}
	}
	m := core.NewMirror(0)
	if err := m.Apply(old.Next(0, 1)); err != nil {
		t.Fatal(err)
	}
	old.Sampled(m.Rows(), []int32{7}, nil)
	if err := m.Apply(old.Next(0, 2)); err != nil {
		t.Fatal(err)
	}
	old.Sampled(m.Rows(), []int32{8}, nil) // a has [7 8]; b waits

	held := old.InFlight()
	if len(held) != 2 || held[0] != a || held[1] != b {
		t.Fatalf("in flight: %+v", held)
	}
	s := mustScheduler(t, core.SchedulerConfig{MaxBatch: 4, MaxQueue: 8, EOS: -1})
	s.Resume(held)
	c := &Request{Prompt: []int32{4}, MaxTokens: 10, Tag: "c"}
	if err := s.Submit(c); err != nil {
		t.Fatal(err)
	}
	if c.Seq <= b.Seq || c.Seq <= a.Seq {
		t.Fatalf("new sequence %d collides with resumed %d, %d", c.Seq, a.Seq, b.Seq)
	}
	st := s.Next(1, 1)
	if len(st.Admitted) != 3 || st.Admitted[0].Seq != a.Seq || st.Admitted[1].Seq != b.Seq || st.Admitted[2].Seq != c.Seq {
		t.Fatalf("admissions of the new epoch: %+v", st.Admitted)
	}
	if got := st.Admitted[0].Output; len(got) != 2 || got[0] != 7 || got[1] != 8 {
		t.Fatalf("resumed request re-admitted with output %v, want [7 8]", got)
	}
	nm := core.NewMirror(1)
	if err := nm.Apply(st); err != nil {
		t.Fatal(err)
	}
	if row := nm.Rows()[0]; row.ID != a.Seq || len(row.Output) != 2 || row.Last() != 8 {
		t.Fatalf("mirror row of the resumed request: %+v", row)
	}
	// The next token continues the output; a stops at its max tokens.
	evs := s.Sampled(nm.Rows(), []int32{9, 5, 6}, nil)
	if len(evs) != 3 || evs[0].Index != 2 || len(a.Output) != 3 {
		t.Fatalf("events after resuming: %+v, a.Output %v", evs, a.Output)
	}
}

// A client whose connection closes for good stops waiting at its next
// keepalive instead of at its context's deadline.
func TestGenerateEndsWhenConnectionCloses(t *testing.T) {
	hub := broadcast.NewHub()
	subj := broadcast.Subjects{Prefix: "tpc", Job: "j"}
	server := hub.Connect() // a rank 0 that takes requests and never answers
	t.Cleanup(server.Close)
	submitted := make(chan struct{}, 1)
	if _, err := server.Subscribe(subj.Generate(), func(*broadcast.Msg) {
		select {
		case submitted <- struct{}{}:
		default:
		}
	}); err != nil {
		t.Fatal(err)
	}
	requester := hub.Connect()
	errc := make(chan error, 1)
	go func() {
		_, err := client.Generate(context.Background(), requester, subj, &api.GenerateRequest{PromptTokenIDs: []int32{1}, MaxTokens: 4}, nil)
		errc <- err
	}()
	select {
	case <-submitted:
	case <-time.After(10 * time.Second):
		t.Fatal("request not submitted within 10s")
	}
	requester.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, broadcast.ErrClosed) || !strings.Contains(err.Error(), "connection to NATS lost") {
			t.Fatalf("Generate: %v, want a lost-connection error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Generate still waiting 10s after its connection closed")
	}
}

// ackOf sends a keepalive for the request whose reply subject is tag, with
// a reply subject, and returns rank 0's answer.
func ackOf(t *testing.T, tr broadcast.Transport, tag string) api.KeepaliveAck {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	data, _ := json.Marshal(api.Message{Reply: tag, Op: "keepalive"})
	b, err := broadcast.Request(ctx, tr, drvSubj.Client(), data)
	if err != nil {
		t.Fatalf("keepalive for %s: %v", tag, err)
	}
	var ack api.KeepaliveAck
	if err := json.Unmarshal(b, &ack); err != nil {
		t.Fatalf("keepalive answer %q: %v", b, err)
	}
	return ack
}

// TestDriverAcksKeepalives: rank 0 answers a keepalive sent with a reply
// subject with whether it holds the request.
func TestDriverAcksKeepalives(t *testing.T) {
	c := startCluster(t, 2)
	inbox := c.requester.NewInbox()
	streaming := make(chan struct{})
	var once sync.Once
	if _, err := c.requester.Subscribe(inbox, func(*broadcast.Msg) { once.Do(func() { close(streaming) }) }); err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(api.GenerateRequest{PromptTokenIDs: []int32{4}, MaxTokens: 100000, Params: greedyParams()})
	if err := c.requester.Publish(&broadcast.Msg{Subject: drvSubj.Generate(), Reply: inbox, Data: data}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-streaming:
	case <-time.After(30 * time.Second):
		t.Fatal("no token within 30s")
	}
	if ack := ackOf(t, c.requester, inbox); !ack.Known {
		t.Error("keepalive for a request being decoded: not known")
	}
	if ack := ackOf(t, c.requester, "_INBOX.nobody"); ack.Known {
		t.Error("keepalive for a request never submitted: known")
	}
	cancelMsg, _ := json.Marshal(api.Message{Reply: inbox, Op: "cancel"})
	if err := c.requester.Publish(&broadcast.Msg{Subject: drvSubj.Client(), Data: cancelMsg}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "the cancelled request still known", func() bool { return !ackOf(t, c.requester, inbox).Known })
}

// TestGenerateEndsWhenRank0Dies: rank 0's connection goes away mid-request
// while the bus stays up (a standalone NATS server); the requester's
// keepalives then find nobody, and after four in a row it stops with
// client.ErrRequestLost instead of waiting out its context (60 s here).
// (With the resume window on, the default, that error makes it resubmit.)
func TestGenerateEndsWhenRank0Dies(t *testing.T) {
	c := startCluster(t, 2)
	errc := make(chan error, 1)
	first := make(chan struct{})
	var once sync.Once
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		ctx = client.WithResumeWindow(ctx, 0)
		_, err := client.Generate(ctx, c.requester, drvSubj, &api.GenerateRequest{PromptTokenIDs: []int32{9}, MaxTokens: 100000, Params: greedyParams()},
			func(int, int32) { once.Do(func() { close(first) }) })
		errc <- err
	}()
	<-first
	c.ranks[0].tr.Close() // as a SIGKILL looks to the NATS server
	err := <-errc
	if !errors.Is(err, client.ErrRequestLost) || !strings.Contains(err.Error(), "rank 0") || !strings.Contains(err.Error(), "gone") {
		t.Fatalf("Generate after rank 0 died: %v, want client.ErrRequestLost saying rank 0 is gone", err)
	}
}

// TestGenerateEndsWhenRank0ForgetsRequest: a rank 0 that answers keepalives
// but no longer holds the request (it restarted) ends the wait after two
// such answers in a row; one "not known" between known ones does not.
func TestGenerateEndsWhenRank0ForgetsRequest(t *testing.T) {
	answers := []bool{false, true, false, false} // then "not known" forever
	keepalives, requester := fakeRank0(t, func(n int, _ string, publish func(string, any)) {
		publish("", api.KeepaliveAck{Known: n <= len(answers) && answers[n-1]})
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err := client.Generate(client.WithResumeWindow(ctx, 0), requester, drvSubj, &api.GenerateRequest{PromptTokenIDs: []int32{1}, MaxTokens: 4}, nil)
	if !errors.Is(err, client.ErrRequestLost) || !strings.Contains(err.Error(), "no longer holds") {
		t.Fatalf("Generate: %v, want client.ErrRequestLost saying rank 0 no longer holds the request", err)
	}
	if n := keepalives.Load(); n != 4 {
		t.Fatalf("gave up after %d keepalives, want 4 (answers: not known, known, not known, not known)", n)
	}
}

// A client that reads its tokens more slowly than rank 0 decodes them
// still gets every token and the final reply: rank 0 has long finished the
// request and answers its keepalives "not known", but the replies queued
// before those answers are read first. onToken's pause plays the slow
// reader (4 s for the 80 tokens; rank 0 decodes them in well under one).
func TestGenerateSlowReader(t *testing.T) {
	c := startCluster(t, 2)
	var notKnown atomic.Int32
	requester := &deliverySpy{Transport: c.requester, on: func(m *broadcast.Msg) {
		if string(m.Data) == `{"known":false}` {
			notKnown.Add(1)
		}
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	n := 0
	rep, err := client.Generate(ctx, requester, drvSubj, &api.GenerateRequest{PromptTokenIDs: []int32{7}, MaxTokens: 80, Params: greedyParams()},
		func(int, int32) { n++; time.Sleep(50 * time.Millisecond) })
	if err != nil || len(rep.Tokens) != 80 || n != 80 {
		t.Fatalf("slow reader: %d tokens streamed, reply %+v, err %v", n, rep, err)
	}
	if notKnown.Load() == 0 {
		t.Fatal("no keepalive was answered \"not known\" while the reader caught up; the test proves nothing")
	}
}

// A step that takes longer than two keepalive intervals (a long prefill, a
// slow rank) does not make a live request look lost, with logprobs (whose
// final reply waits for them) or without.
func TestGenerateLongStep(t *testing.T) {
	for _, logprobs := range []bool{true, false} {
		t.Run(fmt.Sprintf("logprobs=%v", logprobs), func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			hub := broadcast.NewHub()
			ex, err := NewSynthetic(SyntheticConfig{Vocab: drvVocab, EOS: drvEOS, Logits: true, ForwardTime: 2500 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			r := runRank(t, ctx, hub.Connect(), driverConfig(0, 1), ex)
			t.Cleanup(func() { cancel(); _ = r.wait(t) })
			requester := hub.Connect()
			defer requester.Close()
			waitServing(t, requester, 1)
			p := greedyParams()
			if logprobs {
				two := 2
				p.Logprobs = &two
			}
			gctx, gcancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer gcancel()
			rep, err := client.Generate(gctx, requester, drvSubj, &api.GenerateRequest{PromptTokenIDs: []int32{7}, MaxTokens: 1, Params: p}, nil)
			if err != nil || len(rep.Tokens) != 1 {
				t.Fatalf("request with %v steps: reply %+v, err %v", 2500*time.Millisecond, rep, err)
			}
		})
	}
}

// An idle rank 0 with no followers (nothing else wakes its loop) answers a
// keepalive at once rather than at its next step.
func TestDriverIdleAnswersKeepalive(t *testing.T) {
	c := startCluster(t, 1)
	if ackOf(t, c.requester, "_INBOX.gone").Known {
		t.Fatal("a request never submitted is known")
	}
}

// waitServing waits until world ranks answer status through tr.
func waitServing(t *testing.T, tr broadcast.Transport, world int) {
	t.Helper()
	poll.Until(t, 10*time.Second, "ranks not serving", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, _ := client.CollectStatus(ctx, tr, drvSubj, 100*time.Millisecond)
		return len(st) == world
	})
}

// TestDriverResumedClientTimeout: a request carried into a new epoch whose
// client sent keepalives gets a whole client timeout from the epoch's
// start, so one whose client went away while the world re-formed is
// cancelled like any other; one whose client never sent keepalives is never
// timed out.
func TestDriverResumedClientTimeout(t *testing.T) {
	hub := broadcast.NewHub()
	requester := hub.Connect()
	defer requester.Close()
	gone, quiet := subscribeReplies(t, requester), subscribeReplies(t, requester)
	cfg := driverConfig(0, 1)
	cfg.ClientTimeout = 300 * time.Millisecond
	cfg.Resume = []*Request{
		{Seq: 1, Tag: gone.inbox, Prompt: []int32{4}, MaxTokens: 1000000, Params: greedyParams(), LastKeepalive: time.Now().Add(-time.Hour)},
		{Seq: 2, Tag: quiet.inbox, Prompt: []int32{5}, MaxTokens: 3, Params: greedyParams()},
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := startRank(t, ctx, hub, cfg)
	t.Cleanup(func() { cancel(); _ = r.wait(t) })
	last := func(rs *replies) api.GenerateReply {
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			if rep := rs.next(t); rep.Done {
				return rep
			}
		}
		t.Fatal("no final reply within 30s (the request was never timed out)")
		return api.GenerateReply{}
	}
	if rep := last(gone); rep.FinishReason != api.FinishCancelled || !strings.Contains(rep.Error, "client went away") {
		t.Fatalf("resumed request whose requester went away: %+v, want cancelled", rep)
	}
	if rep := last(quiet); rep.FinishReason != api.FinishLength || len(rep.Tokens) != 3 {
		t.Fatalf("resumed request without Keepalives: %+v, want its 3 tokens", rep)
	}
}

// The final reply and "not known" answers arriving together (rank 0 ended
// the request just before a keepalive reached it) end the request with its
// reply, not as lost. The fake rank 0 answers the first keepalive "not
// known", and the second with the final reply followed by eight more.
func TestGenerateFinalReplyCrossesAnswers(t *testing.T) {
	_, requester := fakeRank0(t, func(n int, request string, publish func(string, any)) {
		if n == 2 {
			publish(request, api.GenerateReply{Done: true, FinishReason: api.FinishLength, Tokens: []int32{1, 2}})
			for range 8 {
				publish("", api.KeepaliveAck{Known: false})
			}
		}
		publish("", api.KeepaliveAck{Known: false})
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rep, err := client.Generate(ctx, requester, drvSubj, &api.GenerateRequest{PromptTokenIDs: []int32{1}, MaxTokens: 2}, nil)
	if err != nil || rep.FinishReason != api.FinishLength {
		t.Fatalf("Generate: %+v, %v; want the final reply", rep, err)
	}
}

// fakeRank0 stands in for rank 0 in tests of the client's logic alone. It
// takes requests without answering them and hands every keepalive to
// onKeepalive with its number (from 1), the request's reply subject, and
// publish, which sends v as JSON to subject (to the keepalive's answer
// subject when subject is ""). It returns the keepalive count and a client
// connection.
func fakeRank0(t *testing.T, onKeepalive func(n int, request string, publish func(subject string, v any))) (*atomic.Int32, broadcast.Transport) {
	t.Helper()
	hub := broadcast.NewHub()
	server := hub.Connect()
	t.Cleanup(server.Close)
	var request atomic.Value
	if _, err := server.Subscribe(drvSubj.Generate(), func(m *broadcast.Msg) { request.Store(m.Reply) }); err != nil {
		t.Fatal(err)
	}
	keepalives := new(atomic.Int32)
	if _, err := server.Subscribe(drvSubj.Client(), func(m *broadcast.Msg) {
		req, _ := request.Load().(string)
		onKeepalive(int(keepalives.Add(1)), req, func(subject string, v any) {
			if subject == "" {
				subject = m.Reply
			}
			data, _ := json.Marshal(v)
			_ = server.Publish(&broadcast.Msg{Subject: subject, Data: data})
		})
	}); err != nil {
		t.Fatal(err)
	}
	requester := hub.Connect()
	t.Cleanup(requester.Close)
	return keepalives, requester
}

// TestDriverClientTimeoutOnItsClock: rank 0 judges a client's silence on
// DriverConfig.Clock, not on the wall clock. With the clock held still, a
// request whose client promised keepalives and never sends one decodes on
// for fifty timeouts of real time; once the clock moves past the timeout,
// the next step boundary cancels it.
func TestDriverClientTimeoutOnItsClock(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC).UnixNano())
	cfg := driverConfig(0, 1)
	cfg.ClientTimeout = time.Millisecond
	cfg.Clock = func() time.Time { return time.Unix(0, now.Load()) }
	ctx, cancel := context.WithCancel(context.Background())
	hub := broadcast.NewHub()
	r0 := startRank(t, ctx, hub, cfg)
	t.Cleanup(func() { cancel(); _ = r0.wait(t) })
	requester := hub.Connect()
	t.Cleanup(requester.Close)
	poll.Until(t, 10*time.Second, "rank 0 never became ready", func() bool { return r0.d.Status().State != "joining" })
	reply := subscribeReplies(t, requester)
	data, _ := json.Marshal(api.GenerateRequest{PromptTokenIDs: []int32{4}, MaxTokens: 100000, Keepalive: true, Params: greedyParams()})
	if err := requester.Publish(&broadcast.Msg{Subject: drvSubj.Generate(), Reply: reply.inbox, Data: data}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for tokens := 0; tokens < 20 || time.Since(start) < 50*cfg.ClientTimeout; tokens++ {
		if r := reply.next(t); r.Done {
			t.Fatalf("after %d tokens, with the clock held still: %+v", tokens, r)
		}
	}
	now.Add(int64(2 * cfg.ClientTimeout))
	for {
		r := reply.next(t)
		if !r.Done {
			continue
		}
		if r.FinishReason != api.FinishCancelled || !strings.Contains(r.Error, "client went away") {
			t.Fatalf("after the clock moved: %+v, want cancelled as gone", r)
		}
		return
	}
}

// mustScheduler is NewScheduler for a configuration the test knows valid.
func mustScheduler(t *testing.T, cfg core.SchedulerConfig) *core.Scheduler {
	t.Helper()
	s, err := core.NewScheduler(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
