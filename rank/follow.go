package rank

// The follower loop: apply rank 0's steps in order, run forward, report.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/rank/core"
)

// follow is the loop of ranks other than 0: apply every step in order,
// run forward, report. A gap is filled by replay from rank 0.
func (d *Driver) follow(ctx context.Context) error {
	var st broadcast.Step
	for {
		waitStart := time.Now()
		d.cfg.Flight.enter(PhaseAwait, waitStart)
		select {
		case <-ctx.Done():
			return nil
		case err := <-d.aborts:
			return err
		case <-d.f.behind:
			if len(d.f.steps) > 0 {
				continue // the steps may be on their way
			}
			if target := d.leaderApplied(); target > d.mirror.Applied() {
				if err := d.catchUp(ctx, target); err != nil {
					return err
				}
			}
		case msg := <-d.f.steps:
			d.f.queued.Add(-int64(len(msg.data)))
			if err := d.codec.DecodeStep(msg.data, &st); err != nil {
				d.reject("step", err)
				continue
			}
			if !d.follows(st.Leader) {
				d.reject("sender", fmt.Errorf("step %d published by leader %08x, rank 0 of this job is %08x", st.Step, st.Leader, d.cfg.Leader))
				continue
			}
			err := d.mirror.Check(&st)
			switch {
			case errors.Is(err, core.ErrDuplicate):
				d.count("duplicate")
				continue
			case errors.Is(err, core.ErrStaleEpoch) || errors.Is(err, core.ErrFutureEpoch):
				d.reject("wrong_epoch", err)
				continue
			case errors.Is(err, core.ErrGap):
				// The message that revealed the gap is not kept: replay
				// returns rank 0's own copy of it.
				if err := d.catchUp(ctx, st.Step); err != nil {
					return err
				}
				continue
			case err != nil:
				return fmt.Errorf("%w: rank %d: %w", ErrAborted, d.cfg.Rank, err)
			}
			sctx, end := d.followerSpans(ctx, msg, waitStart, &st)
			err = d.applyAndRun(sctx, &st)
			end()
			if err != nil {
				return err
			}
		}
	}
}

// applyAndRun applies the next step on a follower and runs its forward.
func (d *Driver) applyAndRun(ctx context.Context, st *broadcast.Step) error {
	d.cfg.Flight.enter(PhaseForward, time.Now())
	if err := d.mirror.Apply(st); err != nil {
		return fmt.Errorf("%w: rank %d: %w", ErrAborted, d.cfg.Rank, err)
	}
	d.applied()
	d.f.following = st.Leader
	fctx, span := d.span(ctx, "forward")
	rows := d.mirror.Rows()
	logits, err := d.ex.Forward(fctx, Batch{Epoch: st.Epoch, Step: st.Step, Rows: rows})
	span.End()
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("%w: rank %d: forward of step %d: %w", ErrAborted, d.cfg.Rank, st.Step, err)
	}
	if d.cfg.FollowerPick != nil && len(rows) > 0 && len(logits) == len(rows)*d.ex.Vocab() {
		d.followerPick(rows, logits)
	}
	d.publishState()
	d.cfg.Flight.stepDone(st.Step, len(d.mirror.Rows()), time.Now())
	d.sendHeartbeat()
	return nil
}

// followerPick samples a follower's logits and discards the tokens (see
// DriverConfig.FollowerPick).
func (d *Driver) followerPick(rows []*Seq, logits []float32) {
	d.f.fpTokens, d.f.fpErrs = d.f.fpTokens[:0], d.f.fpErrs[:0]
	d.f.fpReqs = d.f.fpReqs[:0]
	for range rows {
		d.f.fpTokens, d.f.fpErrs = append(d.f.fpTokens, NoToken), append(d.f.fpErrs, nil)
		d.f.fpReqs = append(d.f.fpReqs, nil)
	}
	d.cfg.FollowerPick.Pick(rows, d.f.fpReqs, logits, d.ex.Vocab(), d.f.fpTokens, d.f.fpErrs)
}
