package rank

import (
	"context"
	"math"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/tpcoord/tpcoord/broadcast/api"
)

// Request spans: with tracing on (TraceEvery > 0) rank 0 traces each
// request from admission to finish, following the OpenTelemetry GenAI
// semantic conventions. v1.41.0 is the newest semconv package of this otel
// release that has them (later ones moved them out).
//
// A request that arrives with a W3C trace context in its message headers
// (client.WithHeader) gets its span as a child of the caller's span, so an
// HTTP gateway's trace reaches down to the decode. The span has kind
// server: the GenAI conventions describe the caller's (client) span; rank
// 0 is the remote side that serves it. The span is kept by the request,
// which one goroutine owns at a time (the driver's Run, a Hold between
// epochs, the next epoch's Run), so it survives a re-formed world.

// requestTrace is a request's tracing state.
type requestTrace struct {
	parent trace.SpanContext // from the request's headers; invalid: none
	span   trace.Span        // nil until started, and once ended
}

// requestSpanName is the span name the conventions give, operation then
// model; rank 0 has no model name, so the operation alone.
const requestSpanName = "text_completion"

// remoteParent extracts the trace context a generate request carries, when
// tracing is on; the result is invalid (no parent) otherwise, or when the
// headers hold none or a malformed one.
func (d *Driver) remoteParent(h map[string]string) trace.SpanContext {
	if d.cfg.TraceEvery <= 0 || h[traceparentHeader] == "" {
		return trace.SpanContext{}
	}
	ctx := propagator.Extract(context.Background(), propagation.MapCarrier(h))
	return trace.SpanContextFromContext(ctx)
}

// requestStarted starts r's span if tracing is on and it has none yet (a
// request resumed in a new epoch keeps the one it has).
func (d *Driver) requestStarted(r *Request) {
	if d.cfg.TraceEvery <= 0 || state(r).trace.span != nil {
		return
	}
	ctx := context.Background()
	if state(r).trace.parent.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, state(r).trace.parent)
	}
	_, span := d.cfg.Tracer.Start(ctx, requestSpanName, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(requestAttributes(r)...),
		trace.WithAttributes(attribute.Int("tpc.rank", d.cfg.Rank), attribute.Int64("tpc.epoch", int64(d.cfg.Epoch)),
			attribute.Int64("tpc.request.seq", int64(r.Seq)))) // #nosec G115 -- a sequence number, far below 2^63
	if span.IsRecording() {
		state(r).trace.span = span
	}
}

// requestAttributes are the GenAI request attributes of r: what it asked
// for, with rank 0's defaults applied.
func requestAttributes(r *Request) []attribute.KeyValue {
	p := r.Params
	attrs := []attribute.KeyValue{
		semconv.GenAIOperationNameTextCompletion,
		semconv.GenAIRequestMaxTokens(r.MaxTokens),
		semconv.GenAIRequestTemperature(shortFloat(p.Temperature)),
		semconv.GenAIRequestTopP(shortFloat(p.TopP)),
		semconv.GenAIUsageInputTokens(len(r.Prompt)),
	}
	if p.TopK > 0 { // 0 disables top-k
		attrs = append(attrs, semconv.GenAIRequestTopK(float64(p.TopK)))
	}
	if p.Seed != nil {
		// The attribute is a signed integer; a seed beyond its range is
		// kept as text rather than wrapped to a negative number.
		if *p.Seed <= math.MaxInt64 {
			attrs = append(attrs, semconv.GenAIRequestSeedKey.Int64(int64(*p.Seed)))
		} else {
			attrs = append(attrs, attribute.String("tpc.request.seed", strconv.FormatUint(*p.Seed, 10)))
		}
	}
	return attrs
}

// shortFloat widens a float32 by its shortest decimal form, so a top_p of
// 0.9 shows as 0.9 rather than 0.8999999761581421.
func shortFloat(v float32) float64 {
	f, err := strconv.ParseFloat(strconv.FormatFloat(float64(v), 'g', -1, 32), 64)
	if err != nil {
		return float64(v)
	}
	return f
}

// endSpan ends r's span, if it has one, with its outcome: finish is the
// finish reason and err what went wrong. Only a request that failed
// (finish reason error) marks the span as an error: a cancelled one was
// the client's choice (or its silence), as a 4xx answer does not mark an
// HTTP server's span.
func endSpan(r *Request, finish string, err error, now time.Time) {
	span := state(r).trace.span
	if span == nil {
		return
	}
	state(r).trace.span = nil
	span.SetAttributes(semconv.GenAIUsageOutputTokens(len(r.Output)), semconv.GenAIResponseFinishReasons(finish))
	if t := state(r).times; !t.first.IsZero() && !t.received.IsZero() {
		span.SetAttributes(semconv.GenAIResponseTimeToFirstChunk(t.first.Sub(t.received).Seconds()))
	}
	if finish == api.FinishError && err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End(trace.WithTimestamp(now))
}
