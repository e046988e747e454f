package gateway

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"
)

var propagator = propagation.TraceContext{}

// startSpan starts the request's server span, continuing the caller's
// trace when the request carries a W3C traceparent. Its context goes on
// to rank 0 in the NATS request's headers (rank/client), so one trace runs
// from the HTTP call to the tokens.
func (g *Gateway) startSpan(r *http.Request, op string) (context.Context, trace.Span) {
	ctx := propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	name := op
	if op == "text_completion" || op == "chat" {
		name = op + " " + g.cfg.Model // GenAI convention: "{operation} {model}"
	}
	return g.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
		semconv.HTTPRequestMethodKey.String(r.Method), semconv.URLPath(r.URL.Path),
		semconv.GenAIOperationNameKey.String(op), semconv.GenAIRequestModel(g.cfg.Model)))
}

func (g *Gateway) endSpan(span trace.Span, r *http.Request, status int) {
	span.SetAttributes(semconv.HTTPRoute(r.Pattern), semconv.HTTPResponseStatusCode(status))
	if status >= 500 {
		span.SetStatus(codes.Error, http.StatusText(status))
	}
	span.End()
}

// describeRequest puts the request's GenAI attributes on its span.
func describeRequest(ctx context.Context, pl *plan) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	p := pl.base.Params
	span.SetAttributes(semconv.GenAIRequestMaxTokens(pl.base.MaxTokens), semconv.GenAIRequestTemperature(float64(p.Temperature)),
		semconv.GenAIRequestChoiceCount(pl.n))
	if p.TopP > 0 {
		span.SetAttributes(semconv.GenAIRequestTopP(float64(p.TopP)))
	}
	if p.TopK > 0 {
		span.SetAttributes(semconv.GenAIRequestTopK(float64(p.TopK)))
	}
	if p.Seed != nil {
		span.SetAttributes(semconv.GenAIRequestSeed(int(*p.Seed)))
	}
}

// describeResponse puts the usage and finish reasons on the span.
func describeResponse(ctx context.Context, choices []*choice, u usage) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	reasons := make([]string, len(choices))
	for i, c := range choices {
		reasons[i] = c.finishReason()
	}
	span.SetAttributes(semconv.GenAIUsageInputTokens(u.PromptTokens), semconv.GenAIUsageOutputTokens(u.CompletionTokens),
		semconv.GenAIResponseFinishReasons(reasons...))
}

func recordError(ctx context.Context, e *apiError) {
	span := trace.SpanFromContext(ctx)
	span.SetAttributes(semconv.ErrorTypeKey.String(e.Type))
	if e.Status >= 500 {
		span.SetStatus(codes.Error, e.Message)
	}
}
