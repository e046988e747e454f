package structured

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/cmd/tpcoord/internal/bench/job"
	"github.com/tpcoord/tpcoord/rank/client"
)

// Seeds: request i of round r's batch has seed (r+1)*seedRound + i, plus
// seedConstrained in the constrained batch; the warm-ups are round -1's.
const (
	seedRound       = 1 << 16
	seedConstrained = 1 << 15
)

// request is request i of a batch: unconstrained (ignore_eos) or, with
// schema, constrained to it (EOS where the grammar may end).
func request(o Options, schema []byte, round, i int) *api.GenerateRequest {
	seed := uint64(int64(round+1)*seedRound + int64(i))
	if schema != nil {
		seed += seedConstrained
	}
	p := api.DefaultParams()
	p.Temperature, p.Seed = Temperature, &seed
	if schema == nil {
		p.IgnoreEOS = true
	} else {
		p.StructuredOutputs = &api.StructuredOutputs{JSON: json.RawMessage(schema)}
	}
	return &api.GenerateRequest{PromptTokenIDs: job.Prompt(i, o.Vocab), MaxTokens: o.Tokens, Params: p}
}

// decoder turns output tokens into text, to check that a finished
// constrained output parses.
type decoder interface {
	Decode(ids []int32) (string, error)
}

// submit sends n requests at once to j and waits for every final reply.
// It returns each request's tokens, the requests that finished with stop,
// those of them whose text (decoded with dec; nil: not checked) is JSON,
// and the wall time from the first submission to the last reply.
func submit(ctx context.Context, j *job.Job, n int, req func(i int) *api.GenerateRequest, dec decoder) (batchOutcome, error) {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		out   = batchOutcome{tokens: make([][]int32, n)}
	)
	start := time.Now()
	for i := range n {
		wg.Go(func() {
			rep, err := client.Generate(ctx, j.Bus(), j.Subjects(), req(i), nil)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if first == nil {
					first = fmt.Errorf("request %d: %w", i, err)
				}
				return
			}
			out.tokens[i] = rep.Tokens
			if rep.FinishReason == api.FinishStop {
				out.stopped++
				if dec != nil {
					if text, err := dec.Decode(rep.Tokens); err == nil && json.Valid([]byte(text)) {
						out.jsonValid++
					}
				}
			}
		})
	}
	wg.Wait()
	out.elapsed = time.Since(start).Seconds()
	return out, first
}
