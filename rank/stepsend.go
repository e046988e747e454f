package rank

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"go.opentelemetry.io/otel/trace"

	"github.com/tpcoord/tpcoord/broadcast"
)

// stepSender publishes rank 0's step messages, in order, on a goroutine
// of its own. Rank 0's loop hands it a step and goes on to apply it and
// start the forward pass; the write to the bus (a system call that took
// 70–150 µs on the 2-vCPU test VM, where it wakes the NATS server) runs
// once the loop waits for the card. The loop yields before it waits for
// the card (see Synthetic.Forward), so the step still leaves before
// anything else rank 0 writes.
//
// A publish that fails with broadcast.ErrNotSent is counted: the step is
// in the replay window, and the next step or rank 0's heartbeat shows the
// followers the gap. Any other failure aborts the run at the next step
// boundary.
type stepSender struct {
	d    *Driver
	in   chan outStep
	wg   sync.WaitGroup
	once sync.Once
}

// outStep is one step message for the sender: its own copy of the
// encoding, and its publish span, which the sender ends once it is
// written (the step's span may have ended by then).
type outStep struct {
	span   trace.Span
	k      uint64
	data   []byte
	header map[string]string
}

// stepQueue is how many steps may wait for the sender before the loop
// waits for it in turn; one write normally ends long before the next step.
const stepQueue = 8

func (d *Driver) startStepSender() *stepSender {
	s := &stepSender{d: d, in: make(chan outStep, stepQueue)}
	s.wg.Go(s.run)
	return s
}

// send queues step k's encoding (copied: the caller reuses buf), under a
// publish span child of sctx's that covers the wait in the queue and the
// write. It blocks only while stepQueue steps wait, and gives up when ctx
// is done.
func (s *stepSender) send(ctx, sctx context.Context, k uint64, buf []byte, header map[string]string) {
	_, pub := s.d.span(sctx, "publish")
	select {
	case s.in <- outStep{span: pub, k: k, data: slices.Clone(buf), header: header}:
	case <-ctx.Done():
		pub.End()
	}
}

// stop publishes what is queued and returns when the sender is done.
func (s *stepSender) stop() {
	s.once.Do(func() { close(s.in) })
	s.wg.Wait()
}

func (s *stepSender) run() {
	d := s.d
	steps := d.tr
	if d.cfg.Steps != nil {
		steps = d.cfg.Steps
	}
	for m := range s.in {
		err := steps.Publish(&broadcast.Msg{Subject: d.subj.Step(), Data: m.data, Header: stampSent(m.header)})
		m.span.End()
		switch {
		case err == nil:
		case errors.Is(err, broadcast.ErrNotSent):
			d.warnCounted("step_unsent", "step not sent; followers will replay it", err, "step", m.k)
		default:
			d.Abort(fmt.Errorf("%w: publish step %d: %w", ErrAborted, m.k, err))
		}
	}
}
