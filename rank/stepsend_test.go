package rank

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tpcoord/tpcoord/broadcast"
)

// heldPublisher records the step messages published on it; the first one
// blocks until release is closed.
type heldPublisher struct {
	broadcast.Transport
	release chan struct{}
	mu      sync.Mutex
	got     [][]byte
}

func (h *heldPublisher) Publish(m *broadcast.Msg) error {
	h.mu.Lock()
	first := len(h.got) == 0
	h.got = append(h.got, slices.Clone(m.Data))
	h.mu.Unlock()
	if first {
		<-h.release
	}
	return nil
}

func (h *heldPublisher) published() [][]byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.got)
}

// TestStepSenderQueuesInOrder: rank 0's loop hands a step to the sender
// and goes on while an earlier write is still blocked; the steps go out
// in order, each with the bytes it had when handed over although the
// caller reuses its buffer, and stop publishes what is queued.
func TestStepSenderQueuesInOrder(t *testing.T) {
	hub := broadcast.NewHub()
	held := &heldPublisher{Transport: hub.Connect(), release: make(chan struct{})}
	t.Cleanup(held.Close)
	cfg := driverConfig(0, 1)
	cfg.Steps = held
	ex, err := NewSynthetic(SyntheticConfig{Vocab: drvVocab, EOS: drvEOS})
	if err != nil {
		t.Fatal(err)
	}
	d := NewDriver(cfg, hub.Connect(), ex, Greedy{})
	s := d.startStepSender()
	ctx := context.Background()
	buf := []byte("step 0")
	for k := byte('1'); k <= '4'; k++ {
		buf[len(buf)-1] = k // the loop reuses its buffer for the next step
		done := make(chan struct{})
		go func() { s.send(ctx, ctx, uint64(k-'0'), buf, nil); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("send of step %c waited for the blocked write", k)
		}
		if k == '1' {
			eventually(t, 10*time.Second, "the first step never reached the publisher", func() bool { return len(held.published()) == 1 })
		}
	}
	close(held.release)
	s.stop()
	var got []string
	for _, b := range held.published() {
		got = append(got, string(b))
	}
	if want := []string{"step 1", "step 2", "step 3", "step 4"}; !slices.Equal(got, want) {
		t.Fatalf("published %q, want %q", got, want)
	}
}
