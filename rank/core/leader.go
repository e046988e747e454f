package core

import (
	"errors"
	"fmt"
	"time"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/broadcast/api"
)

// LeaderConfig configures rank 0's deciders.
type LeaderConfig struct {
	Scheduler SchedulerConfig
	// ClientTimeout cancels a request whose client promised or sent
	// keepalives and then was silent this long, counted from submission
	// and from the last time rank 0 itself could hear nobody (Input.Deaf).
	ClientTimeout time.Duration
}

// ClientOp is a requester's message about its request, named by the
// request's Tag: a keepalive or a cancel.
type ClientOp struct {
	Tag    string
	Cancel bool
	// Ack is where a keepalive's answer goes ("" for none).
	Ack string
}

// Input is what reached rank 0 since the last step boundary.
type Input struct {
	// Requests are new requests, in arrival order.
	Requests []*Request
	// Ops are cancels and keepalives, in arrival order.
	Ops []ClientOp
	// Deaf is the last time rank 0's own connection was seen down:
	// nobody could be heard then, so clients' silence counts from it.
	Deaf time.Time
}

// Refusal is a request refused at submission, with the error its
// requester gets and the error's api code ("" for none).
type Refusal struct {
	Req  *Request
	Err  error
	Code string
}

// Ack answers a keepalive: whether rank 0 still holds the request.
type Ack struct {
	Subject string
	Known   bool
}

// Ready is what rank 0 must do at a step boundary, in the order of its
// fields: answer the refused requests; take note of the submitted ones
// (queued now: their spans start); answer the keepalives; send the final
// replies of the requests their clients ended (cancelled, or timed out),
// which may have been submitted at this same boundary; then publish Step,
// which takes Admitted into the batch. Step is nil when there is nothing
// to run. A Ready is valid until the next call to Step or Take.
type Ready struct {
	Refused   []Refusal
	Submitted []*Request
	Acks      []Ack
	Ended     []*Request
	Step      *broadcast.Step
	Admitted  []*Request
	// Preempted are the requests Step preempts: their rows leave the
	// batch and they wait, first in the queue, to be recomputed.
	Preempted []*Request
}

// Leader is rank 0's decisions, without I/O and without a clock of its
// own: which requests are queued or refused, which are cancelled or timed
// out, what each step carries, and what every requester hears after a
// step. The driver feeds it what arrived and the time (Step), the tokens
// sampled (Sampled), and does what it returns.
type Leader struct {
	sched     *Scheduler
	timeout   time.Duration
	alive     map[string]time.Time // last keepalive (or submission) per Tag
	nextSweep time.Time
	ready     Ready
}

// NewLeader returns rank 0's deciders for a new epoch: resume are the
// requests in flight when the previous one stopped, queued ahead of any
// new request, with the tokens they have. A resumed request whose client
// sends keepalives gets a whole client timeout from now: its keepalives
// may have gone unheard while the world re-formed.
func NewLeader(cfg LeaderConfig, resume []*Request, now time.Time) (*Leader, error) {
	sched, err := NewScheduler(cfg.Scheduler)
	if err != nil {
		return nil, err
	}
	l := &Leader{sched: sched, timeout: cfg.ClientTimeout, alive: map[string]time.Time{}}
	l.sched.Resume(resume)
	for _, r := range resume {
		if !r.LastKeepalive.IsZero() {
			l.alive[r.Tag] = now
		}
	}
	return l, nil
}

// Step takes what arrived since the last boundary and decides step k of
// epoch: submissions first, then the clients' messages, then the sweep
// for silent clients (Take), then the step itself.
func (l *Leader) Step(now time.Time, epoch uint32, k uint64, in Input) *Ready {
	rd := l.Take(now, in)
	rd.Step = l.sched.Next(epoch, k)
	rd.Preempted = l.sched.Preempted()
	if rd.Step != nil {
		for _, a := range rd.Step.Admitted {
			if r := l.sched.Request(a.Seq); r != nil {
				rd.Admitted = append(rd.Admitted, r)
			}
		}
	}
	return rd
}

// Take takes what arrived without deciding a step: before the loop
// reports what it holds (InFlight) or stops (Drain), so that nothing that
// arrived goes unanswered.
func (l *Leader) Take(now time.Time, in Input) *Ready {
	rd := &l.ready
	*rd = Ready{Refused: rd.Refused[:0], Submitted: rd.Submitted[:0], Acks: rd.Acks[:0], Ended: rd.Ended[:0], Admitted: rd.Admitted[:0]}
	for _, r := range in.Requests {
		l.submit(r, now)
	}
	for _, op := range in.Ops {
		l.clientOp(op, now)
	}
	l.sweep(now, in.Deaf)
	return rd
}

// ErrSuperseded ends a request whose requester submitted it again (the
// same ID): only the new submission runs.
var ErrSuperseded = errors.New("superseded: its requester submitted it again (the same request_id)")

func (l *Leader) submit(r *Request, now time.Time) {
	submit := l.sched.Submit
	if old := l.sched.FindID(r.ID); old != nil {
		if c := l.sched.Cancel(old.Tag, ErrSuperseded); c != nil {
			l.end(c)
		}
		submit = l.sched.SubmitReplacing
	}
	if err := submit(r); err != nil {
		code := ""
		switch {
		case errors.Is(err, ErrOverloaded):
			code = api.CodeOverloaded
		case errors.Is(err, ErrNeverFits):
			code = api.CodeInvalid
		}
		l.ready.Refused = append(l.ready.Refused, Refusal{Req: r, Err: err, Code: code})
		return
	}
	if r.Keepalives {
		// The client's timeout runs from now, keepalive or not.
		l.alive[r.Tag], r.LastKeepalive = now, now
	}
	l.ready.Submitted = append(l.ready.Submitted, r)
}

func (l *Leader) clientOp(op ClientOp, now time.Time) {
	if op.Cancel {
		if r := l.sched.Cancel(op.Tag, errors.New("cancelled by the client")); r != nil {
			l.end(r)
		}
		return
	}
	l.alive[op.Tag] = now
	r := l.sched.Find(op.Tag)
	if r != nil {
		r.LastKeepalive = now
	}
	if op.Ack != "" {
		l.ready.Acks = append(l.ready.Acks, Ack{Subject: op.Ack, Known: r != nil})
	}
}

// sweep cancels the requests whose clients went silent. It runs every
// tenth of the timeout.
func (l *Leader) sweep(now, deaf time.Time) {
	if now.Before(l.nextSweep) {
		return
	}
	l.nextSweep = now.Add(l.timeout / 10)
	for tag, seen := range l.alive {
		if now.Sub(seen) <= l.timeout || now.Sub(deaf) <= l.timeout {
			continue
		}
		delete(l.alive, tag)
		if r := l.sched.Cancel(tag, fmt.Errorf("client went away (no keepalive for %v)", l.timeout)); r != nil {
			l.end(r)
		}
	}
}

func (l *Leader) end(r *Request) {
	delete(l.alive, r.Tag)
	l.ready.Ended = append(l.ready.Ended, r)
}

// Sampled records the tokens sampled for rows (the batch of the step just
// run, in row order; errs[i] set for a row that could not be sampled) and
// returns what each requester must hear, in the order to send it: first
// tokens before the others' next tokens, each group in row order. A new
// request's client is waiting for its first token; every other stream is
// one step further into its output.
func (l *Leader) Sampled(rows []*Seq, tokens []int32, errs []error) []Event {
	events := firstTokensFirst(l.sched.Sampled(rows, tokens, errs))
	for _, ev := range events {
		if ev.Done {
			delete(l.alive, ev.Req.Tag)
		}
	}
	return events
}

func firstTokensFirst(events []Event) []Event {
	out := make([]Event, 0, len(events))
	for _, ev := range events {
		if ev.Index == 0 {
			out = append(out, ev)
		}
	}
	for _, ev := range events {
		if ev.Index != 0 {
			out = append(out, ev)
		}
	}
	return out
}

// Memory is the KV cache's state: nil when memory is not scheduled.
func (l *Leader) Memory() *api.KVStatus {
	b := l.sched.Blocks()
	if b == nil {
		return nil
	}
	queries, hits := l.sched.PrefixCache()
	return &api.KVStatus{
		BlockSize: b.Config().BlockSize, Blocks: b.Config().Blocks, Used: b.Used(), Preemptions: l.sched.Preemptions(),
		PrefixCacheQueries: queries, PrefixCacheHits: hits,
	}
}

// Request returns the admitted request with sequence ID seq, or nil.
func (l *Leader) Request(seq uint64) *Request { return l.sched.Request(seq) }

// Waiting counts the requests queued for admission.
func (l *Leader) Waiting() int { return l.sched.Waiting() }

// InFlight returns the unfinished requests, admitted or waiting, in
// sequence order, with the tokens they have.
func (l *Leader) InFlight() []*Request { return l.sched.InFlight() }

// Drain ends every open request with reason and err, and returns them in
// sequence order: the loop stopped.
func (l *Leader) Drain(reason string, err error) []*Request {
	out := l.sched.Drain(reason, err)
	for _, r := range out {
		delete(l.alive, r.Tag)
	}
	return out
}
