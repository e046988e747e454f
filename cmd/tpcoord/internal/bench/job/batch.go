package job

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/rank/client"
)

// Batch is a batch of concurrent requests: Requests requests of Tokens
// output tokens each (ignore_eos), at Temperature, with seeds SeedBase,
// SeedBase+1, ...; their prompts are Prompt's.
type Batch struct {
	Requests    int
	Tokens      int
	Vocab       int
	Temperature float32
	SeedBase    uint64
}

// Submit submits b's requests at once and waits for all; it returns the
// output tokens received and the wall time. The error is the first
// request's that failed.
func (j *Job) Submit(ctx context.Context, b Batch) (int, time.Duration, error) {
	out, elapsed, err := j.SubmitTokens(ctx, b)
	total := 0
	for _, toks := range out {
		total += len(toks)
	}
	return total, elapsed, err
}

// SubmitTokens is Submit returning each request's output tokens (nil for
// a request that failed).
func (j *Job) SubmitTokens(ctx context.Context, b Batch) ([][]int32, time.Duration, error) {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	out := make([][]int32, b.Requests)
	start := time.Now()
	for i := range b.Requests {
		wg.Go(func() {
			toks, err := j.generate(ctx, b, i)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil && first == nil:
				first = fmt.Errorf("request %d: %w", i, err)
			case err == nil:
				out[i] = toks
			}
		})
	}
	wg.Wait()
	return out, time.Since(start), first
}

// Prompt is the prompt of request i of a batch: three tokens below vocab
// (scripts/torch_tp_loop.py builds the same ones).
func Prompt(i, vocab int) []int32 {
	return []int32{int32((1 + 7*i) % vocab), int32((100 + 13*i) % vocab), int32((1000 + 31*i) % vocab)}
}

// generate runs request i of b and returns its output tokens.
func (j *Job) generate(ctx context.Context, b Batch, i int) ([]int32, error) {
	seed := b.SeedBase + uint64(i)
	p := api.DefaultParams()
	p.Temperature, p.IgnoreEOS, p.Seed = b.Temperature, true, &seed
	req := &api.GenerateRequest{PromptTokenIDs: Prompt(i, b.Vocab), MaxTokens: b.Tokens, Params: p}
	rep, err := client.Generate(ctx, j.nc, j.subj, req, nil)
	if err != nil {
		return nil, err
	}
	return rep.Tokens, nil
}
