package rank

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/internal/poll"
	"github.com/tpcoord/tpcoord/rank/client"
)

// gatedForward holds every forward pass from the first until release is
// closed, and says when the first began.
type gatedForward struct {
	Executor
	once    sync.Once
	entered chan struct{}
	release chan struct{}
}

func (g *gatedForward) Forward(ctx context.Context, b Batch) ([]float32, error) {
	g.once.Do(func() { close(g.entered) })
	select {
	case <-g.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return g.Executor.Forward(ctx, b)
}

// TestTimingsCountFromArrival: a request that arrives while a step runs
// waits in rank 0's intake until the step ends; its timings count that
// wait, from its arrival, as queue time and in its time to first token.
func TestTimingsCountFromArrival(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hub := broadcast.NewHub()
	syn, err := NewSynthetic(SyntheticConfig{Vocab: drvVocab, EOS: drvEOS, Logits: true})
	if err != nil {
		t.Fatal(err)
	}
	g := &gatedForward{Executor: syn, entered: make(chan struct{}), release: make(chan struct{})}
	r := runRank(t, ctx, hub.Connect(), driverConfig(0, 1), g)
	requester := hub.Connect()
	defer requester.Close()
	poll.Until(t, 10*time.Second, "rank 0 never became ready", func() bool { return r.d.Status().State == "ready" })

	replies := make([]chan *api.GenerateReply, 2)
	submit := func(i int) {
		replies[i] = make(chan *api.GenerateReply, 1)
		go func() { // owned by the test: ends with the request or ctx
			req := &api.GenerateRequest{PromptTokenIDs: []int32{int32(3 + i)}, MaxTokens: 2}
			rep, err := client.Stream(ctx, requester, drvSubj, req, client.Callbacks{})
			if err != nil {
				t.Errorf("request %d: %v", i, err)
			}
			replies[i] <- rep
		}()
	}
	submit(0)
	<-g.entered // request 0's first step is in its forward pass
	submit(1)
	poll.Until(t, 10*time.Second, "request 1 never reached rank 0's intake", func() bool { return len(r.d.l.intake) == 1 })
	// Hold the step a measurable while with request 1 in the intake: its
	// timings must count it, from before this moment.
	const held = 3 * time.Millisecond
	seen := time.Now()
	poll.Until(t, 10*time.Second, "the clock stood still", func() bool { return time.Since(seen) >= held })
	close(g.release)
	for i, ch := range replies {
		rep := <-ch
		if rep == nil || rep.Timings == nil {
			t.Fatalf("request %d: reply %+v without timings", i, rep)
		}
		tm := rep.Timings
		if !(0 <= tm.QueueMs && tm.QueueMs <= tm.FirstTokenMs && tm.FirstTokenMs <= tm.TotalMs) {
			t.Errorf("request %d: timings %+v out of order", i, tm)
		}
		if i == 1 && (tm.QueueMs < ms(held) || tm.FirstTokenMs < ms(held)) {
			t.Errorf("request 1 waited in the intake for more than %v; timings %+v", held, tm)
		}
	}
}
