package rank

import (
	"context"
	"time"

	"github.com/tpcoord/tpcoord/broadcast"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

const traceparentHeader = "traceparent"

// stepMsg is a step as the subscription hands it to the follower loop.
type stepMsg struct {
	data        []byte
	traceparent string
	arrived     time.Time
}

var propagator = propagation.TraceContext{}

// traceHeader returns the W3C trace context of ctx's span as message
// headers, or nil when the span is not recording (untraced step).
func traceHeader(ctx context.Context) map[string]string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	h := map[string]string{}
	propagator.Inject(ctx, propagation.MapCarrier(h))
	return h
}

func (d *Driver) traced(k uint64) bool {
	return d.cfg.TraceEvery > 0 && k%uint64(d.cfg.TraceEvery) == 0
}

// leaderSpan starts rank 0's span for step k if the step is traced; the
// returned span is a no-op otherwise.
func (d *Driver) leaderSpan(ctx context.Context, k uint64) (context.Context, trace.Span) {
	if !d.traced(k) {
		return ctx, trace.SpanFromContext(ctx)
	}
	return d.cfg.Tracer.Start(ctx, "step", trace.WithAttributes(
		attribute.Int("tpc.rank", d.cfg.Rank), attribute.Int64("tpc.step", int64(k)), attribute.Int64("tpc.epoch", int64(d.cfg.Epoch))))
}

// span starts a child span when ctx carries a recording span.
func (d *Driver) span(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return ctx, parent
	}
	return d.cfg.Tracer.Start(ctx, name, trace.WithAttributes(attrs...))
}

// followerSpans joins rank 0's trace for a step that carries a traceparent:
// a step span with an await_step child covering the wait for the message.
// The returned func ends the step span.
func (d *Driver) followerSpans(ctx context.Context, m stepMsg, waitStart time.Time, st *broadcast.Step) (context.Context, func()) {
	if m.traceparent == "" {
		return ctx, func() {}
	}
	pctx := propagator.Extract(ctx, propagation.MapCarrier{traceparentHeader: m.traceparent})
	if !trace.SpanContextFromContext(pctx).IsValid() {
		return ctx, func() {}
	}
	sctx, span := d.cfg.Tracer.Start(pctx, "step", trace.WithTimestamp(waitStart), trace.WithAttributes(
		attribute.Int("tpc.rank", d.cfg.Rank), attribute.Int64("tpc.step", int64(st.Step)), attribute.Int64("tpc.epoch", int64(st.Epoch))))
	_, wait := d.cfg.Tracer.Start(sctx, "await_step", trace.WithTimestamp(waitStart))
	arrived := m.arrived
	if arrived.Before(waitStart) {
		arrived = waitStart // it was queued while this rank was busy: no wait
	}
	wait.End(trace.WithTimestamp(arrived))
	return sctx, func() { span.End() }
}
