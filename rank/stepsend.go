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
// of its own, so that the write to the bus (a system call that took
// 70–150 µs on the 2-vCPU test VM, where it wakes the NATS server) need
// not hold up rank 0's loop. Whether the loop waits for it is the
// executor's to say (StepOverlapper): a model whose ranks meet in
// collectives cannot finish before the last follower starts, so rank 0
// launches its own forward pass only once the step is written, as if it
// had written it itself.
//
// A publish that fails with broadcast.ErrNotSent is counted: the step is
// in the replay window, and the next step or rank 0's heartbeat shows the
// followers the gap. Any other failure aborts the run at the next step
// boundary, and the steps queued behind it are dropped.
type stepSender struct {
	d  *Driver
	in chan outStep
	wg sync.WaitGroup
}

// outStep is one step message for the sender: its own copy of the
// encoding; its publish span, which the sender ends once the step is
// written (the step's span may have ended by then); and written, closed
// then (or when the step is dropped).
type outStep struct {
	span    trace.Span
	k       uint64
	data    []byte
	header  map[string]string
	written chan struct{}
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
// is done. The returned channel is closed once the step has been written
// or given up.
func (s *stepSender) send(ctx, sctx context.Context, k uint64, buf []byte, header map[string]string) <-chan struct{} {
	_, pub := s.d.span(sctx, "publish")
	m := outStep{span: pub, k: k, data: slices.Clone(buf), header: header, written: make(chan struct{})}
	select {
	case s.in <- m:
	case <-ctx.Done():
		pub.End()
		close(m.written)
	}
	return m.written
}

// stop publishes what is queued and returns when the sender is done.
// Call it once, after the last send.
func (s *stepSender) stop() {
	close(s.in)
	s.wg.Wait()
}

func (s *stepSender) run() {
	d := s.d
	steps := d.tr
	if d.cfg.Steps != nil {
		steps = d.cfg.Steps
	}
	var failed error
	for m := range s.in {
		if failed != nil {
			m.span.End()
			close(m.written)
			continue
		}
		err := steps.Publish(&broadcast.Msg{Subject: d.subj.Step(), Data: m.data, Header: stampSent(m.header)})
		m.span.End()
		close(m.written)
		switch {
		case err == nil:
		case errors.Is(err, broadcast.ErrNotSent):
			d.warnCounted("step_unsent", "step not sent; followers will replay it", err, "step", m.k)
		default:
			failed = fmt.Errorf("%w: publish step %d: %w", ErrAborted, m.k, err)
			d.log.Error("cannot publish a step; stopping", "step", m.k, "err", err)
			d.Abort(failed)
		}
	}
}
