package launch

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/rank/client"
)

// Demo is launch --demo: a few seeded requests submitted at once, their
// tokens printed, then the output tokens/s.
type Demo struct {
	Requests, MaxTokens int
	Vocab               int    // the job's: prompts stay below it
	Label               string // the summary's description of the job
}

// Run submits the requests to j and prints one line per request and a
// summary to out.
func (d Demo) Run(ctx context.Context, j *Job, out io.Writer) error {
	type result struct {
		rep *api.GenerateReply
		err error
	}
	results := make([]result, d.Requests)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range d.Requests {
		wg.Go(func() {
			rep, err := client.Generate(ctx, j.Bus, j.Subj, d.request(i), nil)
			results[i] = result{rep, err}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	total := 0
	for i, r := range results {
		if r.err != nil {
			return fmt.Errorf("request %d: %w", i, r.err)
		}
		total += len(r.rep.Tokens)
		fmt.Fprintf(out, "request %d (%s, %d tokens): %v\n", i, r.rep.FinishReason, len(r.rep.Tokens), r.rep.Tokens)
	}
	fmt.Fprintf(out, "%d requests, %d output tokens in %v: %.1f tokens/s (%s)\n",
		d.Requests, total, elapsed.Round(time.Millisecond), float64(total)/elapsed.Seconds(), d.Label)
	return nil
}

// request is demo request i: three prompt tokens, sampled at T=0.8,
// top-p 0.95 with seed i, so two runs give the same tokens.
func (d Demo) request(i int) *api.GenerateRequest {
	seed, v := uint64(i), max(d.Vocab, 1)
	params := api.DefaultParams()
	params.Temperature, params.TopP, params.Seed = 0.8, 0.95, &seed
	return &api.GenerateRequest{
		PromptTokenIDs: []int32{int32((1 + 7*i) % v), int32((100 + 13*i) % v), int32((1000 + 31*i) % v)},
		MaxTokens:      d.MaxTokens,
		Params:         params,
	}
}
