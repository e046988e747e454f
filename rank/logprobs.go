package rank

import (
	"slices"

	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/sampler"
)

// logprober computes the logprobs that requests asked for, off the
// critical path: the rows are captured when their tokens are sampled at
// step k, and computed on another goroutine while step k+1's forward pass
// runs. Token replies go out at once; the logprobs follow, and a request
// that finished at step k gets its final reply after them.
type logprober struct {
	s     *sampler.Sampler // its own: Sample must not run concurrently with Logprobs
	eos   int32
	vocab int
	jobs  []*lpJob
	spare [][]float32
	done  chan struct{} // set while a computation runs
}

type lpJob struct {
	req            *Request
	index          int
	token          int32
	n              int
	prompt, output []int32
	logits         []float32
	allow          []uint64 // the grammar's mask the token was sampled under; nil: none
	res            api.Logprobs
	err            error
	finish         bool // the request finished with this token: reply after the logprobs
}

func newLogprober(vocab int, eos int32) *logprober {
	return &logprober{s: sampler.New(sampler.Config{Vocab: vocab}), eos: eos, vocab: vocab}
}

// capture copies the rows whose requests want logprobs. It runs before
// Scheduler.Sampled appends the tokens, so a row's output is the history
// the token was sampled from. mask, if not nil, gives the grammar mask of
// a row, which the logprobs are computed under too.
func (l *logprober) capture(rows []*Seq, reqs []*Request, logits []float32, tokens []int32, errs []error, mask func(int) []uint64) {
	for i, r := range rows {
		req := reqs[i]
		if req == nil || req.Params.Logprobs == nil || errs[i] != nil || tokens[i] < 0 {
			continue
		}
		var buf []float32
		if n := len(l.spare); n > 0 {
			buf, l.spare = l.spare[n-1], l.spare[:n-1]
		} else {
			buf = make([]float32, l.vocab)
		}
		copy(buf, logits[i*l.vocab:(i+1)*l.vocab])
		j := &lpJob{
			req: req, index: len(r.Output), token: tokens[i], n: *req.Params.Logprobs,
			prompt: r.Prompt, output: slices.Clone(r.Output), logits: buf,
		}
		if mask != nil {
			j.allow = slices.Clone(mask(i))
		}
		l.jobs = append(l.jobs, j)
	}
}

// pending returns the captured job of req, if any.
func (l *logprober) pending(req *Request) *lpJob {
	for _, j := range l.jobs {
		if j.req == req {
			return j
		}
	}
	return nil
}

// start computes the captured jobs on a goroutine; wait collects them.
func (l *logprober) start() {
	if len(l.jobs) == 0 || l.done != nil {
		return
	}
	l.done = make(chan struct{})
	jobs := l.jobs
	go func() {
		defer close(l.done)
		for _, j := range jobs {
			row := sampler.Row{Logits: j.logits, Params: &j.req.Params, Prompt: j.prompt, Output: j.output, EOS: l.eos, Allow: j.allow}
			j.res, j.err = l.s.Logprobs(row, j.token, j.n)
		}
	}()
}

// wait finishes the computation (starting it if needed) and hands the
// jobs over; their buffers return to the spare list.
func (l *logprober) wait() []*lpJob {
	if len(l.jobs) == 0 {
		return nil
	}
	l.start()
	<-l.done
	l.done = nil
	jobs := l.jobs
	l.jobs = nil
	for _, j := range jobs {
		l.spare = append(l.spare, j.logits)
		j.logits = nil
	}
	return jobs
}
