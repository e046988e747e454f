package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/rank/client"
)

// maxTokensChoices are the requests' lengths, short ones more often.
var maxTokensChoices = []int{4, 8, 16, 32, 32, 64, 64, 128, 256}

// newRequest draws one request of the mix: a random prompt, greedy (30%)
// or sampled with assorted parameters, a seed (85%), logprobs (25%),
// ignore_eos (50%; the others stop at EOS, which the synthetic model makes
// likely after 8 to 47 tokens).
func newRequest(rng *rand.Rand, vocab int) api.GenerateRequest {
	prompt := make([]int32, 1+rng.IntN(48))
	for i := range prompt {
		prompt[i] = int32(1 + rng.IntN(vocab-1))
	}
	req := api.GenerateRequest{PromptTokenIDs: prompt, MaxTokens: maxTokensChoices[rng.IntN(len(maxTokensChoices))]}
	p := &req.Params
	if rng.Float64() >= 0.3 {
		sampledParams(rng, &req)
	}
	if rng.Float64() < 0.85 {
		s := rng.Uint64() >> 1 // in [0, 2^63): also a valid HTTP seed
		p.Seed = &s
	}
	if rng.Float64() < 0.25 {
		n := []int{0, 1, 5}[rng.IntN(3)]
		p.Logprobs = &n
	}
	p.IgnoreEOS = rng.Float64() < 0.5
	return req
}

func sampledParams(rng *rand.Rand, req *api.GenerateRequest) {
	p := &req.Params
	p.Temperature = float32(0.5 + 0.8*rng.Float64())
	if rng.Float64() < 0.4 {
		p.TopK = []int{20, 50, 200}[rng.IntN(3)]
	}
	if rng.Float64() < 0.3 {
		p.TopP = float32(0.8 + 0.18*rng.Float64())
	}
	if rng.Float64() < 0.1 {
		p.MinP = 0.05
	}
	if rng.Float64() < 0.15 {
		p.RepetitionPenalty = 1.1
	}
	if rng.Float64() < 0.1 {
		p.PresencePenalty = 0.5
	}
	if rng.Float64() < 0.1 {
		p.FrequencyPenalty = 0.3
	}
	if rng.Float64() < 0.1 {
		p.MinTokens = min(4, req.MaxTokens)
	}
}

// sender sends a request of the mix through either path.
type sender struct {
	bus     *clientBus
	subj    broadcast.Subjects
	gw      *gatewayClient
	timeout time.Duration // the soak's deadline for one request
}

func (s *sender) send(ctx context.Context, id int, path string, req api.GenerateRequest) reqRecord {
	if path == pathGateway {
		return s.gw.generate(ctx, id, req, s.timeout)
	}
	return generate(ctx, s.bus, s.subj, id, req, s.timeout)
}

func (s *sender) close() {
	s.bus.close()
	s.gw.close()
}

// countPath counts the requests that took path.
func countPath(recs []reqRecord, path string) int {
	n := 0
	for i := range recs {
		if recs[i].Path == path {
			n++
		}
	}
	return n
}

// pathOf is request id's path: every other one goes through the gateway.
func pathOf(id int) string {
	if id%2 == 0 {
		return pathGateway
	}
	return pathGo
}

// generate runs one request through the Go client and records how it
// ended; timeout is the soak's deadline for it.
func generate(ctx context.Context, bus *clientBus, subj broadcast.Subjects, id int, req api.GenerateRequest, timeout time.Duration) reqRecord {
	rec := reqRecord{ID: id, Path: pathGo, Sent: time.Now(), Request: req}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var idx []int
	var toks []int32
	rep, err := func() (*api.GenerateReply, error) {
		c, err := bus.get(rctx)
		if err != nil {
			return nil, fmt.Errorf("connect: %w", err)
		}
		return client.Generate(rctx, c, subj, &req, func(i int, t int32) {
			idx, toks = append(idx, i), append(toks, t)
			rec.TokenMs = append(rec.TokenMs, roundMs(msSince(rec.Sent, time.Now())))
		})
	}()
	rec.Done = time.Now()
	if rep != nil {
		rec.Tokens, rec.Finish = rep.Tokens, rep.FinishReason
		if req.Logprobs != nil {
			rec.Logprobs = hashJSON(rep.TokenLogprobs)
			rec.TokenLogprob, rec.LogprobsMissing = tokenLogprobs(len(rep.Tokens), rep.TokenLogprobs)
		}
	}
	if err != nil {
		rec.Error = err.Error()
		rec.TimedOut = errors.Is(rctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil
	}
	rec.Stream.Streamed = len(idx)
	if rep != nil && rep.Done {
		rec.Stream = checkStream(idx, toks, rec.Tokens)
	}
	return rec
}

// tokenLogprobs is each of n tokens' own logprob from the client's list
// (in which a token whose logprobs never came has Token -1), and how many
// are missing.
func tokenLogprobs(n int, lps []api.Logprobs) (out []*float32, missing int) {
	out = make([]*float32, n)
	for i := range out {
		if i < len(lps) && lps[i].Token >= 0 {
			v := lps[i].Logprob
			out[i] = &v
		} else {
			missing++
		}
	}
	return out, missing
}

func hashJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return "unencodable: " + err.Error()
	}
	h := fnv.New64a()
	_, _ = h.Write(b)
	return fmt.Sprintf("%016x", h.Sum64())
}

// loadGen submits requests at a steady rate, at most maxInFlight at once
// (a tick that finds them all busy is skipped and counted).
type loadGen struct {
	to          *sender
	vocab       int
	rate        float64
	maxInFlight int
	rng         *rand.Rand
	out         *jsonl

	wg      sync.WaitGroup
	mu      sync.Mutex
	recs    []reqRecord
	skipped int
}

// run sends until sendCtx ends, then waits for the requests in flight;
// reqCtx cancels those (the soak was interrupted).
func (l *loadGen) run(sendCtx, reqCtx context.Context) {
	tick := time.NewTicker(time.Duration(float64(time.Second) / l.rate))
	defer tick.Stop()
	sem := make(chan struct{}, l.maxInFlight)
	for id := 1; ; id++ {
		select {
		case <-sendCtx.Done():
			l.wg.Wait()
			return
		case <-tick.C:
		}
		req := newRequest(l.rng, l.vocab)
		select {
		case sem <- struct{}{}:
		default:
			l.mu.Lock()
			l.skipped++
			l.mu.Unlock()
			continue
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			rec := l.to.send(reqCtx, id, pathOf(id), req)
			<-sem
			l.out.write(&rec)
			l.mu.Lock()
			l.recs = append(l.recs, rec)
			l.mu.Unlock()
		}()
	}
}

func (l *loadGen) results() ([]reqRecord, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]reqRecord(nil), l.recs...), l.skipped
}

// replayAll runs every request again, conc at a time, on a fault-free
// job, by the path it took, with the seed it had (on the gateway path the
// one the gateway reported).
func replayAll(ctx context.Context, to *sender, recs []reqRecord, conc int, out *jsonl) map[int]replayRecord {
	res := make(map[int]replayRecord, len(recs))
	var mu sync.Mutex
	work := make(chan reqRecord)
	var wg sync.WaitGroup
	for range conc {
		wg.Go(func() {
			for r := range work {
				req := r.Request
				req.Seed = r.replaySeed()
				g := to.send(ctx, r.ID, r.Path, req)
				rep := replayRecord{ID: r.ID, Tokens: g.Tokens, Finish: g.Finish, Logprobs: g.Logprobs, TokenLogprob: g.TokenLogprob, Error: g.Error}
				out.write(&rep)
				mu.Lock()
				res[r.ID] = rep
				mu.Unlock()
			}
		})
	}
	for _, r := range recs {
		if ctx.Err() != nil {
			break
		}
		work <- r
	}
	close(work)
	wg.Wait()
	return res
}
