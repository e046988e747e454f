package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/broadcast/api"
)

// DefaultResumeWindow is how long Stream goes on resubmitting a request
// whose rank 0 cannot be reached, or lost it, before it gives up: long
// enough for systemd to restart a rank 0, a NATS server to come back or a
// world to re-form.
const DefaultResumeWindow = time.Minute

// errNotSubmitted marks a submission that failed before it was sent (its
// reply inbox could not be subscribed: the connection to NATS is down,
// perhaps reconnecting): sending it again may succeed.
var errNotSubmitted = errors.New("not submitted")

// ErrOverflow is the error of a stream whose client fell behind its
// replies; the request is resubmitted from the tokens it has.
var ErrOverflow = errors.New("reply stream overflowed: this client fell behind")

type resumeWindowKey struct{}

// WithResumeWindow sets how long Stream resubmits a request across faults
// without progress (DefaultResumeWindow if unset; 0: never resubmit).
func WithResumeWindow(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, resumeWindowKey{}, d)
}

type resumeNoticeKey struct{}

// WithResumeNotice has Stream call notice before it resubmits a request
// after a fault, with the fault and how many tokens it resumes from (on
// the caller's goroutine), so that a waiting client can say why it waits.
func WithResumeNotice(ctx context.Context, notice func(err error, tokens int)) context.Context {
	return context.WithValue(ctx, resumeNoticeKey{}, notice)
}

func resumeWindow(ctx context.Context) time.Duration {
	if d, ok := ctx.Value(resumeWindowKey{}).(time.Duration); ok {
		return d
	}
	return DefaultResumeWindow
}

// Backoff between resubmissions: doubling from the first to the last.
const (
	resumeBackoffFirst = 100 * time.Millisecond
	resumeBackoffLast  = 2 * time.Second
)

// attemptFunc submits req once and streams its replies to cb.
type attemptFunc func(req *api.GenerateRequest, cb Callbacks) (*api.GenerateReply, error)

// resumable runs a request to its end across faults. Each submission
// carries one request ID (a new random one unless req has its own), so
// that rank 0 runs it once. When a submission fails for a reason that may
// pass (rank 0 gone or restarted, no rank 0 subscribed, the world
// re-forming, this client fallen behind), the
// request is submitted again, after a backoff, with the tokens received
// so far as resume_token_ids: rank 0 continues after them at the same
// noise positions, so a seeded or greedy request's output is that of an
// undisturbed run. The callbacks see every token once, in order. It gives
// up when ctx ends, or when the window passes without a token.
func resumable(ctx context.Context, req *api.GenerateRequest, cb Callbacks, attempt attemptFunc) (*api.GenerateReply, error) {
	r := *req
	if r.RequestID == "" {
		r.RequestID = newRequestID()
	}
	t := &tracker{cb: cb, have: slices.Clone(r.ResumeTokenIDs), lpNext: len(r.ResumeTokenIDs)}
	window, backoff := resumeWindow(ctx), resumeBackoffFirst
	var stalled time.Time           // when the current run of failures without a token began
	var finished *api.GenerateReply // the answer, while its lost logprobs are drawn again
	for {
		before := len(t.have)
		rep, err := attempt(&r, t.callbacks())
		if finished != nil && err != nil {
			return t.finish(finished, nil) // the answer stands, without them
		}
		if err == nil && window > 0 && t.refills < maxLogprobRefills && t.lacksLogprobs(&r, rep) {
			// Every token came (some in the final reply), but a
			// logprobs reply was lost: the same tokens are drawn again
			// from there, with their logprobs.
			t.refills++
			finished = rep
			r.ResumeTokenIDs = t.resumeFrom(true)
			continue
		}
		if err == nil || window <= 0 || ctx.Err() != nil || !retryable(rep, err) {
			return t.finish(rep, err)
		}
		now := time.Now()
		if len(t.have) > before || stalled.IsZero() {
			stalled, backoff = now, resumeBackoffFirst
		}
		if now.Sub(stalled) > window {
			return nil, fmt.Errorf("%w (the request was resubmitted for %v without a token, the resume window)", err, window)
		}
		if len(t.have) >= r.MaxTokens {
			// Every token came; only the final reply was lost.
			return t.finish(&api.GenerateReply{Done: true, FinishReason: api.FinishLength}, nil)
		}
		if notice, ok := ctx.Value(resumeNoticeKey{}).(func(error, int)); ok {
			notice(err, len(t.have))
		}
		if !sleepCtx(ctx, backoff) {
			return t.finish(rep, err)
		}
		backoff = min(2*backoff, resumeBackoffLast)
		r.ResumeTokenIDs = t.resumeFrom(r.Logprobs != nil)
	}
}

// retryable reports whether a failed submission may succeed if made
// again: rank 0 gone, restarted or not subscribed, the world re-forming,
// this client fallen behind its replies, or its connection down when it
// subscribed its reply inbox (the soak saw NATS restarts end 4 requests
// so).
func retryable(rep *api.GenerateReply, err error) bool {
	switch {
	case errors.Is(err, ErrRequestLost), errors.Is(err, broadcast.ErrNoResponders), errors.Is(err, ErrOverflow), errors.Is(err, errNotSubmitted):
		return true
	case rep != nil:
		// Not CodeOverloaded: a full queue answers 429 at once, so that
		// clients and load balancers back off.
		return rep.ErrorCode == api.CodeUnavailable
	}
	return false
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// newRequestID is a random request ID: 16 bytes, hex.
func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// tracker passes each output token to the callbacks once, in order,
// whichever submission it came from.
type tracker struct {
	cb       Callbacks
	have     []int32        // the output so far, in order, without gaps
	held     map[int]int32  // tokens past a gap, until it is filled
	logprobs []api.Logprobs // by output index; Token -1 where none came
	lpNext   int            // logprobs before this index were passed on
	refills  int            // submissions made again for lost logprobs
}

func (t *tracker) callbacks() Callbacks {
	return Callbacks{Token: t.token, Logprobs: t.logprob}
}

func (t *tracker) token(index int, tok int32) {
	switch {
	case index < len(t.have):
		return // a token a resubmission sent again
	case index > len(t.have):
		if t.held == nil {
			t.held = map[int]int32{}
		}
		t.held[index] = tok // a reply lost before it: the final reply fills the gap
		return
	}
	t.take(tok)
	for {
		next, ok := t.held[len(t.have)]
		if !ok {
			return
		}
		delete(t.held, len(t.have))
		t.take(next)
	}
}

func (t *tracker) take(tok int32) {
	if t.cb.Token != nil {
		t.cb.Token(len(t.have), tok)
	}
	t.have = append(t.have, tok)
	t.flushLogprobs()
}

func (t *tracker) logprob(index int, lp *api.Logprobs) {
	if index < t.lpNext {
		return // passed on already
	}
	for len(t.logprobs) <= index {
		t.logprobs = append(t.logprobs, api.Logprobs{Token: -1})
	}
	t.logprobs[index] = *lp
	t.flushLogprobs()
}

// flushLogprobs passes on, in order, the logprobs of tokens passed on,
// each once: a token's logprobs follow its own call.
func (t *tracker) flushLogprobs() {
	for t.lpNext < len(t.have) && t.lpNext < len(t.logprobs) && t.logprobs[t.lpNext].Token != -1 {
		if t.cb.Logprobs != nil {
			t.cb.Logprobs(t.lpNext, &t.logprobs[t.lpNext])
		}
		t.lpNext++
	}
}

// resumeFrom is the output a resubmission continues after: every token
// received, or, when the request wants logprobs, those whose logprobs came
// (rank 0 sends them a step after the token; the others are sampled and
// sent again, the same tokens, with their logprobs). Tokens held past a
// gap are dropped: the resubmission sends them again.
func (t *tracker) resumeFrom(logprobs bool) []int32 {
	t.held = nil
	if logprobs {
		return slices.Clone(t.have[:t.lpNext])
	}
	return slices.Clone(t.have)
}

// maxLogprobRefills bounds the resubmissions of a finished request for
// logprobs whose replies were lost.
const maxLogprobRefills = 3

// lacksLogprobs reports whether req, finished as rep, wants logprobs that
// never came for some of its tokens, and drawing those tokens again gives
// the same ones (a seed, or greedy).
func (t *tracker) lacksLogprobs(req *api.GenerateRequest, rep *api.GenerateReply) bool {
	if req.Logprobs == nil || rep == nil || !rep.Done || (rep.FinishReason != api.FinishLength && rep.FinishReason != api.FinishStop) {
		return false
	}
	if req.Seed == nil && req.Temperature >= api.GreedyBelow {
		return false
	}
	t.fill(rep)
	return t.lpNext < len(t.have)
}

// fill passes on the tokens a lost reply left out, from the final reply's
// token list.
func (t *tracker) fill(rep *api.GenerateReply) {
	if len(rep.Tokens) > len(t.have) && slices.Equal(rep.Tokens[:len(t.have)], t.have) {
		for _, tok := range rep.Tokens[len(t.have):] {
			t.take(tok)
		}
	}
}

// finish completes the final reply: the tokens a lost reply left out go to
// the callbacks from its token list, and it carries the whole output.
func (t *tracker) finish(rep *api.GenerateReply, err error) (*api.GenerateReply, error) {
	if rep == nil {
		return rep, err
	}
	t.fill(rep)
	if rep.Done {
		rep.Tokens = t.have
	}
	if len(t.logprobs) > 0 {
		rep.TokenLogprobs = t.logprobs
	}
	return rep, err
}
