package job

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/tpcoord/tpcoord/rank/client"
	"github.com/tpcoord/tpcoord/sampler"
)

// Batch is a batch of concurrent requests: Requests requests of Tokens
// output tokens each (ignore_eos), at Temperature, with seeds SeedBase,
// SeedBase+1, ...; their prompts are three tokens below Vocab.
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
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		total int
		first error
	)
	start := time.Now()
	for i := range b.Requests {
		wg.Go(func() {
			n, err := j.generate(ctx, b, i)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil && first == nil:
				first = fmt.Errorf("request %d: %w", i, err)
			case err == nil:
				total += n
			}
		})
	}
	wg.Wait()
	return total, time.Since(start), first
}

// generate runs request i of b and returns its output tokens.
func (j *Job) generate(ctx context.Context, b Batch, i int) (int, error) {
	seed := b.SeedBase + uint64(i)
	p := sampler.DefaultParams()
	p.Temperature, p.IgnoreEOS, p.Seed = b.Temperature, true, &seed
	req := &client.GenerateRequest{
		PromptTokenIDs: []int32{int32((1 + 7*i) % b.Vocab), int32((100 + 13*i) % b.Vocab), int32((1000 + 31*i) % b.Vocab)},
		MaxTokens:      b.Tokens, Params: p,
	}
	rep, err := client.Generate(ctx, j.nc, j.subj, req, nil)
	if err != nil {
		return 0, err
	}
	return len(rep.Tokens), nil
}
