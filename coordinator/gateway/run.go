package gateway

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/rank/client"
)

// format shapes an answer: OpenAI's completion or chat completion.
type format interface {
	// chunk is one streamed event of c: the tokens and text since the
	// last (tokens[0] is token number from), and the finish when final.
	chunk(c *choice, tokens []int32, text string, from int, final bool) any
	// response is the whole answer of a request that did not stream.
	response(choices []*choice, u usage) any
	// opening is what a stream sends for c before its first token (nil:
	// nothing).
	opening(c *choice) any
	usageChunk(u usage) any
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

func usageOf(choices []*choice, prompts [][]int32) usage {
	var u usage
	for _, p := range prompts {
		u.PromptTokens += len(p)
	}
	for _, c := range choices {
		u.CompletionTokens += len(c.tokens)
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	return u
}

// execution is one HTTP request's choices in flight.
type execution struct {
	g   *Gateway
	pl  *plan
	fmt format
	sse *sseWriter // nil: not streaming

	mu        sync.Mutex // orders the choices' events on sse, and failure
	failure   *apiError  // the first choice that failed before anything was sent
	cancelAll context.CancelFunc
}

// run sends every choice and waits until all have ended. A lone choice
// runs on the caller's goroutine (one wake-up less on the way to its
// first token); several have a goroutine each, owned by this call.
func (x *execution) run(ctx context.Context) []*choice {
	ctx, x.cancelAll = context.WithCancel(ctx)
	defer x.cancelAll()
	reqs := x.pl.requests()
	choices := make([]*choice, len(reqs))
	var wg sync.WaitGroup
	for i := range reqs {
		var d Detokenizer
		if x.g.tok != nil {
			d = x.g.tok.NewDetokenizer()
		}
		choices[i] = newChoice(i, reqs[i], x.pl.stops, d)
	}
	if len(choices) == 1 {
		x.runChoice(ctx, choices[0])
		return choices
	}
	for _, c := range choices {
		wg.Go(func() { x.runChoice(ctx, c) })
	}
	wg.Wait()
	return choices
}

func (x *execution) runChoice(ctx context.Context, c *choice) {
	ctx, c.cancel = context.WithCancel(ctx)
	defer c.cancel()
	c.start = time.Now()
	x.g.metrics.running.Inc()
	defer x.g.metrics.running.Dec()
	x.emitOpening(c)
	cb := client.Callbacks{Token: func(_ int, tok int32) {
		if c.onToken(time.Now(), tok) {
			c.cancel() // a stop string: rank 0 frees the row now
		}
		if x.pl.logprobs == nil {
			x.emit(c, false)
		}
	}}
	if x.pl.logprobs != nil {
		cb.Logprobs = func(i int, lp *api.Logprobs) {
			c.onLogprobs(i, lp)
			x.emit(c, false)
		}
	}
	// The request's span goes on to rank 0, whose request span joins it.
	if mux, err := x.g.replies(ctx); err != nil {
		c.err = fmt.Errorf("subscribe replies: %w", err)
	} else {
		c.rep, c.err = mux.Stream(withTraceHeader(ctx), x.g.subj, &c.req, cb)
	}
	if shutDown(ctx, c) {
		c.err = errShuttingDown
	}
	c.finish()
	x.g.metrics.observe(c, time.Now())
	if c.failed() {
		x.fail(ctx, c)
		return
	}
	x.emit(c, true)
}

// shutDown reports whether c was cut short by the gateway's shutdown
// (rather than finishing, or reaching a stop string, as it was ended): it
// then fails, so that its client hears why.
func shutDown(ctx context.Context, c *choice) bool {
	return errors.Is(context.Cause(ctx), errShuttingDown) && !c.stopped && (c.rep == nil || c.rep.FinishReason == api.FinishCancelled)
}

// failed reports whether c ended in an error of its own (not a stop
// string, not its client going away).
func (c *choice) failed() bool {
	return c.err != nil && !c.stopped
}

// fail records c's failure: before anything was streamed it becomes the
// answer (and the other choices are cancelled); after, an error event.
func (x *execution) fail(ctx context.Context, c *choice) {
	e := x.pl.requestParam(replyError(c.rep, c.err, errors.Is(context.Cause(ctx), context.DeadlineExceeded)))
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.sse == nil || !x.sse.started {
		if x.failure == nil {
			x.failure = e
			x.cancelAll()
		}
		return
	}
	x.sse.send(e.body())
}

func (x *execution) emitOpening(c *choice) {
	if x.sse == nil {
		return
	}
	if v := x.fmt.opening(c); v != nil {
		x.mu.Lock()
		defer x.mu.Unlock()
		x.sse.pending = append(x.sse.pending, v) // sent with the first token
	}
}

// emit streams what c has not yet sent.
func (x *execution) emit(c *choice, final bool) {
	if x.sse == nil {
		return
	}
	tokens, text, from := c.unsent(final, x.pl.logprobs != nil)
	if len(tokens) == 0 && text == "" && !final {
		return
	}
	v := x.fmt.chunk(c, tokens, text, from, final)
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.failure == nil {
		x.sse.send(v)
	}
}
