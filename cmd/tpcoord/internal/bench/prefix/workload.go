package prefix

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/rank/client"
)

// firstToken is the lowest token ID a prompt uses, above the special
// tokens small vocabularies put first (BOS, EOS, padding).
const firstToken = 8

// What a token stream is for, in its seed: every prompt of a round is the
// same on both jobs, and differs between rounds and purposes.
const (
	streamWarm = iota + 1
	streamPrefix
	streamSuffix
	streamTurn
)

// tokens are n pseudo-random token IDs in [firstToken, vocab), fixed by
// the round, the stream and its index.
func tokens(n, vocab, round, stream, index int) []int32 {
	rng := rand.New(rand.NewPCG(uint64(round)<<32|uint64(stream), uint64(index)))
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(firstToken + rng.IntN(vocab-firstToken))
	}
	return out
}

// sender sends greedy requests to rank 0 through a rank/client.Mux, as
// the gateway does.
type sender struct {
	mux  *client.Mux
	subj broadcast.Subjects
}

// send sends prompt for maxTokens tokens (greedy, ignore_eos) and returns
// the time from sending it to its first token, and its tokens.
func (s sender) send(ctx context.Context, prompt []int32, maxTokens int) (time.Duration, []int32, error) {
	p := api.DefaultParams()
	p.Temperature, p.IgnoreEOS = 0, true
	req := &api.GenerateRequest{PromptTokenIDs: prompt, MaxTokens: maxTokens, Params: p}
	var (
		ttft time.Duration
		out  = make([]int32, 0, maxTokens)
	)
	start := time.Now()
	_, err := s.mux.Stream(ctx, s.subj, req, client.Callbacks{Token: func(_ int, tok int32) {
		if len(out) == 0 {
			ttft = time.Since(start)
		}
		out = append(out, tok)
	}})
	if err == nil && len(out) != maxTokens {
		err = fmt.Errorf("%d tokens, want %d (ignore_eos)", len(out), maxTokens)
	}
	return ttft, out, err
}

// warmUp sends one request as long as the TTFT workload's, of tokens no
// measured prompt shares, so the first measured request does not pay for
// the job's (and the model's) first forward passes.
func warmUp(ctx context.Context, s sender, o Options, round int) error {
	_, _, err := s.send(ctx, tokens(o.PrefixTokens+o.SuffixTokens, o.Vocab, round, streamWarm, 0), 2)
	if err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	return nil
}

// runTTFT sends the TTFT workload's requests one after another, each when
// the last ended: the shared prefix and a suffix of its own. It returns
// each one's TTFT in ms, in order.
func runTTFT(ctx context.Context, s sender, o Options, round int) ([]float64, error) {
	prefix := tokens(o.PrefixTokens, o.Vocab, round, streamPrefix, 0)
	out := make([]float64, 0, o.Requests)
	for i := range o.Requests {
		prompt := append(prefix[:len(prefix):len(prefix)], tokens(o.SuffixTokens, o.Vocab, round, streamSuffix, i)...)
		ttft, _, err := s.send(ctx, prompt, o.MaxTokens)
		if err != nil {
			return nil, fmt.Errorf("TTFT request %d: %w", i, err)
		}
		out = append(out, ms(ttft))
	}
	return out, nil
}

// chatSamples are what the chat workload's clients saw: every request's
// TTFT in ms, and the prompt tokens they sent.
type chatSamples struct {
	ttft         []float64
	promptTokens int
	elapsed      time.Duration
}

// runChat runs o.Chats conversations at once, each o.Turns requests in
// sequence: the whole history so far (every earlier message and answer)
// and a new message.
func runChat(ctx context.Context, s sender, o Options, round int) (chatSamples, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		mu  sync.Mutex
		out chatSamples
		wg  sync.WaitGroup
	)
	start := time.Now()
	for c := range o.Chats {
		wg.Go(func() {
			var history []int32
			for t := range o.Turns {
				history = append(history, tokens(o.TurnTokens, o.Vocab, round, streamTurn, c*o.Turns+t)...)
				ttft, answer, err := s.send(ctx, history, o.AnswerTokens)
				if err != nil {
					cancel(fmt.Errorf("chat %d turn %d: %w", c, t, err))
					return
				}
				mu.Lock()
				out.ttft, out.promptTokens = append(out.ttft, ms(ttft)), out.promptTokens+len(history)
				mu.Unlock()
				history = append(history, answer...)
			}
		})
	}
	wg.Wait()
	out.elapsed = time.Since(start)
	if err := context.Cause(ctx); err != nil {
		return chatSamples{}, err
	}
	return out, nil
}

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }
