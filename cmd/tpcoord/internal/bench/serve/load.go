package serve

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tpcoord/tpcoord/cmd/tpcoord/internal/bench/job"
)

// Every request samples at this temperature, ignoring EOS, so both paths
// decode the same number of tokens with the same seeds.
const (
	temperature = 0.8
	seedBase    = 1000
	warmSeed    = 1 << 20
)

// request is request i of a round: the same on both paths.
type request struct {
	prompt    []int32
	seed      uint64
	maxTokens int
}

func requestOf(i, vocab, maxTokens int, seed uint64) request {
	return request{prompt: job.Prompt(i, vocab), seed: seed + uint64(i), maxTokens: maxTokens}
}

// sender is one path to the job: it sends r and calls onTokens with the
// number of tokens in each event as it arrives (on the caller's
// goroutine), and returns once the request ended.
type sender interface {
	name() string
	send(ctx context.Context, r request, onTokens func(n int)) error
}

// sample is one request as its client saw it: the time from sending it to
// the arrival of each of its tokens (the tokens of one event share it).
type sample struct {
	arrivals []time.Duration
}

// measure sends r over s and times its tokens; a request that did not
// decode all of r.maxTokens tokens is an error (they ignore EOS).
func measure(ctx context.Context, s sender, r request) (sample, error) {
	start := time.Now()
	arr := make([]time.Duration, 0, r.maxTokens)
	err := s.send(ctx, r, func(n int) {
		d := time.Since(start)
		for range n {
			arr = append(arr, d)
		}
	})
	if err == nil && len(arr) != r.maxTokens {
		err = fmt.Errorf("%d tokens, want %d (ignore_eos)", len(arr), r.maxTokens)
	}
	return sample{arrivals: arr}, err
}

// load is what a round submits: a number of requests, or requests for as
// long as a window lasts.
type load struct {
	requests  int
	window    time.Duration
	maxTokens int
	vocab     int
	seed      uint64
	think     time.Duration // the most a client waits before request i
	// round picks the round's think times: each round draws its own, and
	// a round's two paths draw the same.
	round int
}

// thinkTime is request i's wait before it is sent: in [0, l.think), from
// a hash of the seed, the round and i (splitmix64), so both paths of a
// round wait alike and the rounds sample different phases of the step.
func (l load) thinkTime(i int) time.Duration {
	if l.think <= 0 {
		return 0
	}
	z := l.seed ^ uint64(l.round)<<40 + uint64(i)*0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	z ^= z >> 31
	return time.Duration(z % uint64(l.think))
}

// wait sleeps request i's think time, or until ctx ends.
func (l load) wait(ctx context.Context, i int) {
	d := l.thinkTime(i)
	if d == 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// next hands out request indices: until requests were handed out, or
// until the window since start has passed.
func (l load) next(n *atomic.Int64, start time.Time) (int, bool) {
	if l.requests == 0 && time.Since(start) >= l.window {
		return 0, false
	}
	i := int(n.Add(1) - 1)
	return i, l.requests == 0 || i < l.requests
}

// roundSamples are a round's requests and its wall time, from the first
// submission to the end of the last request.
type roundSamples struct {
	samples []sample
	elapsed time.Duration
}

// runRound runs clients concurrent clients, each sending its next request
// a think time after the last ended, until l is exhausted. The first failed request
// ends the round with its error.
func runRound(ctx context.Context, s sender, clients int, l load) (roundSamples, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		next atomic.Int64
		mu   sync.Mutex
		out  []sample
		wg   sync.WaitGroup
	)
	start := time.Now()
	for range clients {
		wg.Go(func() {
			for i, ok := l.next(&next, start); ok && ctx.Err() == nil; i, ok = l.next(&next, start) {
				l.wait(ctx, i)
				sm, err := measure(ctx, s, requestOf(i, l.vocab, l.maxTokens, l.seed))
				if err != nil {
					cancel(fmt.Errorf("%s: request %d: %w", s.name(), i, err))
					return
				}
				mu.Lock()
				out = append(out, sm)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := context.Cause(ctx); err != nil {
		return roundSamples{}, err
	}
	return roundSamples{samples: out, elapsed: elapsed}, nil
}
