package rank

import (
	"context"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/rank/client"
)

// nanRows is an executor whose logits hold a NaN (or +Inf) in every row
// of the sequences whose prompt starts with poison.
type nanRows struct {
	Executor
	poison int32
	inf    bool
}

func (e *nanRows) Forward(ctx context.Context, b Batch) ([]float32, error) {
	logits, err := e.Executor.Forward(ctx, b)
	if err != nil || logits == nil {
		return logits, err
	}
	v := e.Vocab()
	bad := float32(math.NaN())
	if e.inf {
		bad = float32(math.Inf(1))
	}
	for i, r := range b.Rows {
		if r.Prompt[0] == e.poison {
			logits[i*v+v/2] = bad
		}
	}
	return logits, nil
}

// TestDriverBadLogitsFailOneRequest: a row whose logits hold NaN or +Inf
// fails its own request, with an error naming rank 0 and the step; the
// other rows of the batch decode to the end.
func TestDriverBadLogitsFailOneRequest(t *testing.T) {
	for _, inf := range []bool{false, true} {
		hub := broadcast.NewHub()
		ctx, cancel := context.WithCancel(context.Background())
		ex, err := NewSynthetic(SyntheticConfig{Vocab: drvVocab, EOS: drvEOS, Logits: true})
		if err != nil {
			t.Fatal(err)
		}
		r0 := runRank(t, ctx, hub.Connect(), driverConfig(0, 1), &nanRows{Executor: ex, poison: 66, inf: inf})
		requester := hub.Connect()
		waitServing(t, requester, 1)
		gctx, gcancel := context.WithTimeout(context.Background(), 30*time.Second)
		var wg sync.WaitGroup
		errs := make([]error, 2)
		reps := make([]*api.GenerateReply, 2)
		for i, first := range []int32{66, 5} {
			wg.Go(func() {
				req := &api.GenerateRequest{PromptTokenIDs: []int32{first, 7}, MaxTokens: 12, Params: api.Params{IgnoreEOS: true}}
				reps[i], errs[i] = client.Generate(gctx, requester, drvSubj, req, nil)
			})
		}
		wg.Wait()
		gcancel()
		want := "NaN"
		if inf {
			want = "+Inf"
		}
		if errs[0] == nil || !strings.Contains(errs[0].Error(), "rank 0: step ") || !strings.Contains(errs[0].Error(), want) {
			t.Errorf("poisoned request: %v, want an error naming rank 0, the step and %s", errs[0], want)
		}
		if errs[1] != nil || len(reps[1].Tokens) != 12 {
			t.Errorf("healthy request: %v, %v; want its 12 tokens", errs[1], reps[1])
		}
		cancel()
		if err := r0.wait(t); err != nil {
			t.Errorf("rank 0 stopped with %v", err)
		}
	}
}
