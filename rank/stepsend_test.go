package rank

import (
	"context"
	"errors"
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
)

// heldPublisher records the step messages published on it; the first one
// blocks until release is closed (a nil release blocks none), and the
// ones whose ordinal (from 1) fail returns true for fail with err.
type heldPublisher struct {
	broadcast.Transport
	release chan struct{}
	fail    func(n int) bool
	err     error
	mu      sync.Mutex
	got     [][]byte
}

func (h *heldPublisher) Publish(m *broadcast.Msg) error {
	if m.Subject != drvSubj.Step() {
		return h.Transport.Publish(m)
	}
	h.mu.Lock()
	h.got = append(h.got, slices.Clone(m.Data))
	n := len(h.got)
	h.mu.Unlock()
	if n == 1 && h.release != nil {
		<-h.release
	}
	if h.fail != nil && h.fail(n) {
		return h.err
	}
	return h.Transport.Publish(m)
}

func (h *heldPublisher) published() [][]byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.got)
}

func newSenderDriver(t *testing.T, steps broadcast.Transport) *Driver {
	t.Helper()
	hub := broadcast.NewHub()
	main := hub.Connect()
	t.Cleanup(main.Close)
	cfg := driverConfig(0, 1)
	cfg.Steps = steps
	ex, err := NewSynthetic(SyntheticConfig{Vocab: drvVocab, EOS: drvEOS})
	if err != nil {
		t.Fatal(err)
	}
	return NewDriver(cfg, main, ex, Greedy{})
}

// sendWithin hands step k to s and fails the test if that blocks.
func sendWithin(t *testing.T, s *stepSender, k uint64, buf []byte) <-chan struct{} {
	t.Helper()
	ctx := context.Background()
	done := make(chan (<-chan struct{}), 1)
	go func() { done <- s.send(ctx, ctx, k, buf, nil) }()
	select {
	case w := <-done:
		return w
	case <-time.After(30 * time.Second):
		t.Fatalf("send of step %d waited for the blocked write", k)
		return nil
	}
}

// checkWritten fails the test for every written channel still open (the
// steps' sender has stopped).
func checkWritten(t *testing.T, written []<-chan struct{}) {
	t.Helper()
	for i, w := range written {
		select {
		case <-w:
		default:
			t.Errorf("step %d's written channel still open after stop", i+1)
		}
	}
}

// TestStepSenderQueuesInOrder: rank 0's loop hands a step to the sender
// and goes on while an earlier write is still blocked; a step's written
// channel closes only once it is written; the steps go out in order, each
// with the bytes it had when handed over although the caller reuses its
// buffer; and stop publishes what is queued.
func TestStepSenderQueuesInOrder(t *testing.T) {
	held := &heldPublisher{Transport: broadcast.NewHub().Connect(), release: make(chan struct{})}
	t.Cleanup(held.Close)
	s := newSenderDriver(t, held).startStepSender()
	buf := []byte("step 0")
	var written []<-chan struct{}
	for k := byte('1'); k <= '4'; k++ {
		buf[len(buf)-1] = k // the loop reuses its buffer for the next step
		written = append(written, sendWithin(t, s, uint64(k-'0'), buf))
		if k == '1' {
			poll.Until(t, 10*time.Second, "the first step never reached the publisher", func() bool { return len(held.published()) == 1 })
		}
	}
	select {
	case <-written[0]:
		t.Fatal("step 1's written channel closed while its write was blocked")
	default:
	}
	close(held.release)
	s.stop()
	checkWritten(t, written)
	var got []string
	for _, b := range held.published() {
		got = append(got, string(b))
	}
	if want := []string{"step 1", "step 2", "step 3", "step 4"}; !slices.Equal(got, want) {
		t.Fatalf("published %q, want %q", got, want)
	}
}

// TestStepSenderDropsAfterFailure: after a publish fails for good, the
// sender aborts the run naming the step and publishes none of the steps
// queued behind it (their written channels still close).
func TestStepSenderDropsAfterFailure(t *testing.T) {
	held := &heldPublisher{Transport: broadcast.NewHub().Connect(), release: make(chan struct{}),
		fail: func(n int) bool { return n == 1 }, err: errors.New("nats: maximum payload exceeded")}
	t.Cleanup(held.Close)
	d := newSenderDriver(t, held)
	s := d.startStepSender()
	var written []<-chan struct{}
	for k := uint64(1); k <= 3; k++ {
		written = append(written, sendWithin(t, s, k, []byte("step")))
	}
	close(held.release)
	s.stop()
	checkWritten(t, written)
	if n := len(held.published()); n != 1 {
		t.Errorf("%d steps reached the publisher, want only the failed first", n)
	}
	select {
	case err := <-d.aborts:
		if !errors.Is(err, ErrAborted) || !strings.Contains(err.Error(), "publish step 1") {
			t.Errorf("abort %v, want ErrAborted naming step 1", err)
		}
	default:
		t.Error("no abort after a failed publish")
	}
}

// writeChecker is an Executor (not a StepOverlapper: the interface type is
// embedded) that records, at each Forward, whether the step's message had
// been written.
type writeChecker struct {
	Executor
	held   *heldPublisher
	behind atomic.Int64
}

func (c *writeChecker) Forward(ctx context.Context, b Batch) ([]float32, error) {
	if uint64(len(c.held.published())) < b.Step {
		c.behind.Add(1)
	}
	return c.Executor.Forward(ctx, b)
}

// TestForwardWaitsForItsStep: for an executor that does not overlap its
// forward pass with the step's write, rank 0 calls Forward only once the
// step message is written.
func TestForwardWaitsForItsStep(t *testing.T) {
	hub := broadcast.NewHub()
	held := &heldPublisher{Transport: hub.Connect()}
	t.Cleanup(held.Close)
	syn, err := NewSynthetic(SyntheticConfig{Vocab: drvVocab, EOS: drvEOS, Logits: true})
	if err != nil {
		t.Fatal(err)
	}
	ex := &writeChecker{Executor: syn, held: held}
	if overlapsStep(ex) || !overlapsStep(syn) {
		t.Fatalf("overlapsStep: wrapped %v, synthetic %v; want false, true", overlapsStep(ex), overlapsStep(syn))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cfg := driverConfig(0, 1)
	cfg.Steps = held
	r := runRank(t, ctx, hub.Connect(), cfg, ex)
	t.Cleanup(func() { cancel(); _ = r.wait(t) })
	requester := hub.Connect()
	t.Cleanup(requester.Close)
	poll.Until(t, 10*time.Second, "rank 0 never became ready", func() bool { return r.d.Status().State != "joining" })
	gctx, gcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer gcancel()
	req := &api.GenerateRequest{PromptTokenIDs: []int32{3, 1, 4}, MaxTokens: 12, Params: api.Params{IgnoreEOS: true}}
	if _, err := client.Generate(gctx, requester, drvSubj, req, nil); err != nil {
		t.Fatal(err)
	}
	if n := ex.behind.Load(); n != 0 {
		t.Errorf("%d forward passes started before their step was written", n)
	}
}
