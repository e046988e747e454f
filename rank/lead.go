package rank

// The leader loop (rank 0): step boundaries decided by rank/core, the
// step published, the forward pass, the sample, the replies.

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/rank/core"
)

// leadScratch is what rank 0's loop reuses from step to step.
type leadScratch struct {
	out    *stepSender
	buf    []byte
	tokens []int32
	errs   []error
	reqs   []*Request
}

// lead is rank 0's loop: schedule, publish, apply, forward, sample, stream.
func (d *Driver) lead(ctx context.Context) error {
	sc := leadScratch{out: d.startStepSender()}
	defer sc.out.stop()
	for k := uint64(1); ; {
		// A step boundary: stop here if asked, even when every step is
		// ready at once (no follower to wait for, a forward that does not
		// block), or a busy loop would never notice.
		select {
		case <-ctx.Done():
			return nil
		case err := <-d.aborts:
			return err
		default:
		}
		st := d.boundary(k)
		if st == nil || len(d.mirror.Rows())+len(st.Admitted)-len(st.Removed) == 0 {
			d.sendLogprobs() // no forward pass to hide them behind
		}
		if st == nil {
			if err := d.idle(ctx); err != nil || ctx.Err() != nil {
				return err
			}
			continue
		}
		d.cfg.Flight.enter(PhaseAwait, time.Now())
		if err := d.awaitFollowers(ctx, k); err != nil {
			if ctx.Err() != nil {
				return nil // cancelled while waiting: a clean stop
			}
			return err
		}
		if err := d.leadStep(ctx, k, st, &sc); err != nil || ctx.Err() != nil {
			return err
		}
		if err := d.checkDigests(); err != nil {
			return err
		}
		k++
	}
}

// idle waits, with nothing to run, for a request, a follower's heartbeat
// (whose digest is then checked: followers report the last steps of a
// burst after rank 0 went idle), an abort or the end.
func (d *Driver) idle(ctx context.Context) error {
	d.cfg.Flight.enter(PhaseIdle, time.Now())
	select {
	case <-ctx.Done():
		return nil
	case err := <-d.aborts:
		return err
	case <-d.wake:
		return d.checkDigests()
	case r := <-d.l.intake:
		d.l.in.Requests = append(d.l.in.Requests, r) // decided at the next boundary, at once
	}
	return nil
}

// leadStep publishes step k, applies it, and runs the forward pass and the
// sampler on the batch it leaves.
func (d *Driver) leadStep(ctx context.Context, k uint64, st *broadcast.Step, sc *leadScratch) error {
	st.Leader = d.cfg.Leader
	sctx, stepSpan := d.leaderSpan(ctx, k)
	defer stepSpan.End()
	d.cfg.Flight.enter(PhasePublish, time.Now())
	sc.buf = d.codec.AppendStep(sc.buf[:0], st)
	d.l.window.Add(st.Epoch, k, sc.buf)
	if err := d.mirror.Apply(st); err != nil {
		return fmt.Errorf("%w: rank 0 cannot apply its own step: %w", ErrAborted, err)
	}
	d.applied()
	d.mu.Lock()
	d.peerTab.RecordDigest(k, d.mirror.Digest())
	d.mu.Unlock()
	rows := d.mirror.Rows()
	if len(rows) == 0 {
		sc.out.send(ctx, sctx, k, sc.buf, traceHeader(sctx))
	} else if err := d.forwardAndSample(ctx, sctx, k, rows, sc); err != nil || ctx.Err() != nil {
		return err
	}
	d.publishState()
	d.cfg.Flight.stepDone(k, len(rows), time.Now())
	return nil
}

// forwardAndSample runs step k's forward pass on rows, picks their tokens
// and streams them to the requesters.
func (d *Driver) forwardAndSample(ctx, sctx context.Context, k uint64, rows []*Seq, sc *leadScratch) error {
	d.cfg.Flight.enter(PhaseForward, time.Now())
	fctx, fwd := d.span(sctx, "forward")
	sc.tokens, sc.errs, sc.reqs = sc.tokens[:0], sc.errs[:0], sc.reqs[:0]
	for _, r := range rows {
		sc.tokens, sc.errs = append(sc.tokens, NoToken), append(sc.errs, nil)
		sc.reqs = append(sc.reqs, d.l.core.Request(r.ID))
	}
	if p, ok := d.pick.(Prefetcher); ok {
		p.Prefetch(rows, sc.reqs) // noise rows made while the card works
	}
	d.l.lp.start() // the previous step's logprobs, while the card works
	if !d.sendStep(ctx, sctx, k, sc) {
		settle(d.pick)
		return nil // cancelled while the step was being written
	}
	logits, err := d.ex.Forward(fctx, Batch{Epoch: d.cfg.Epoch, Step: k, Rows: rows})
	fwd.End()
	d.sendLogprobs()
	if err != nil {
		settle(d.pick)
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("%w: rank 0: forward of step %d: %w", ErrAborted, k, err)
	}
	_, smp := d.span(sctx, "sample", attribute.Int("rows", len(rows)))
	d.cfg.Flight.enter(PhaseSample, time.Now())
	d.pick.Pick(rows, sc.reqs, logits, d.ex.Vocab(), sc.tokens, sc.errs)
	for i, err := range sc.errs {
		if rows[i].Prefilling() {
			// Not sampled, whatever the picker made of its logits (a
			// worker need not write them): no token, and no error.
			sc.tokens[i], sc.errs[i] = NoToken, nil
			continue
		}
		if err != nil {
			// Only rank 0's model returns logits: a row it cannot sample
			// (NaN, +Inf) fails that request alone, naming where it came from.
			sc.errs[i] = fmt.Errorf("rank 0: step %d, sequence %d: %w", k, rows[i].ID, err)
		}
	}
	d.cfg.Flight.enter(PhaseReply, time.Now())
	smp.End()
	d.l.lp.capture(rows, sc.reqs, logits, sc.tokens, sc.errs, rowMasks(d.pick))
	d.stream(d.l.core.Sampled(rows, sc.tokens, sc.errs))
	return nil
}

// sendStep hands step k's message (in sc.buf) to the step sender, and
// waits until it is written unless the executor overlaps its forward pass
// with the write. It is called last before Forward: the goroutines woken
// before it (prefetch, logprobs) then run after the sender, since the
// last goroutine made ready runs first when the loop next waits. The
// wait is charged to the publish phase. It returns false if ctx ended
// while it waited.
func (d *Driver) sendStep(ctx, sctx context.Context, k uint64, sc *leadScratch) bool {
	written := sc.out.send(ctx, sctx, k, sc.buf, traceHeader(sctx))
	if overlapsStep(d.ex) {
		return true
	}
	d.cfg.Flight.enter(PhasePublish, time.Now())
	defer func() { d.cfg.Flight.enter(PhaseForward, time.Now()) }()
	select {
	case <-written:
		return true
	case <-ctx.Done():
		return false
	}
}

// gather collects what reached rank 0 since the last boundary into d.l.in.
func (d *Driver) gather() {
	for {
		select {
		case r := <-d.l.intake:
			d.l.in.Requests = append(d.l.in.Requests, r)
		case op := <-d.l.ops:
			d.l.in.Ops = append(d.l.in.Ops, op)
		default:
			d.mu.Lock()
			d.thawed()
			d.l.in.Deaf = d.deafAt // nobody could be heard then: silence counts from it
			d.mu.Unlock()
			return
		}
	}
}

// boundary is rank 0's step boundary: what arrived goes to the leader's
// core, which decides step k; its answers go out in the order it gives.
// It returns the step to publish, or nil when there is nothing to run.
func (d *Driver) boundary(k uint64) *broadcast.Step {
	d.gather()
	rd := d.l.core.Step(d.cfg.Clock(), d.cfg.Epoch, k, d.l.in)
	d.act(rd)
	if n := len(rd.Preempted); n > 0 {
		d.cfg.Flight.notePreempted(n)
		d.log.Debug("preempted for want of KV blocks", "step", k, "requests", n, "first_seq", rd.Preempted[0].Seq)
	}
	now := time.Now()
	for _, r := range rd.Admitted {
		if t := &state(r).times; t.scheduled.IsZero() { // one resumed keeps its first stamp
			t.scheduled = now
		}
	}
	return rd.Step
}

// take hands what arrived to the leader's core without deciding a step
// (before InFlight and the final drain), and acts on its answers.
func (d *Driver) take() {
	d.gather()
	d.act(d.l.core.Take(d.cfg.Clock(), d.l.in))
}

// act does what the core decided at a boundary, in its order, and
// empties the input it consumed.
func (d *Driver) act(rd *core.Ready) {
	clear(d.l.in.Requests)
	clear(d.l.in.Ops)
	d.l.in.Requests, d.l.in.Ops = d.l.in.Requests[:0], d.l.in.Ops[:0]
	for _, f := range rd.Refused {
		d.reply(f.Req.Tag, api.FailedReply(f.Err, f.Code))
	}
	for _, r := range rd.Submitted {
		d.requestStarted(r)
	}
	for _, a := range rd.Acks {
		d.ack(a.Subject, a.Known)
	}
	now := time.Now()
	for _, r := range rd.Ended {
		d.finish(r, now)
	}
}

// awaitFollowers blocks until every follower has reported this epoch and
// applied at least step k-1-MaxLag, so rank 0 runs at most MaxLag+1 steps
// ahead of the slowest rank.
func (d *Driver) awaitFollowers(ctx context.Context, k uint64) error {
	need := int64(k) - 1 - int64(d.cfg.MaxLag)
	progress := time.NewTicker(5 * time.Second)
	defer progress.Stop()
	start := time.Now()
	for {
		slowest, behind := d.slowest(need)
		if slowest < 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-d.aborts:
			return err
		case <-d.wake:
			// A follower that diverged may be the one rank 0 waits for.
			if err := d.checkDigests(); err != nil {
				return err
			}
		case <-progress.C:
			d.log.Info("waiting for followers", "step", k, "slowest_rank", slowest, "detail", behind, "waited", time.Since(start).Round(time.Second))
		}
	}
}

// slowest returns a follower that has not reached need, or -1.
func (d *Driver) slowest(need int64) (int, string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.peerTab.Slowest(need)
}

// checkDigests compares every follower's reported digest with rank 0's at
// the same step.
func (d *Driver) checkDigests() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.peerTab.Diverged()
}

// settle has a picker that prepared for a step wait for that preparation,
// when the step will not be sampled.
func settle(p Picker) {
	if s, ok := p.(interface{ Settle() }); ok {
		s.Settle()
	}
}

// rowMasks returns the picker's grammar masks of the last batch, or nil.
func rowMasks(p Picker) func(int) []uint64 {
	if m, ok := p.(interface{ RowMask(int) []uint64 }); ok {
		return m.RowMask
	}
	return nil
}
