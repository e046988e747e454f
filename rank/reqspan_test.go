package rank

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/rank/client"
)

// TestRequestSpanJoinsCallerTrace: a generate request sent with the W3C
// trace context of a caller's span (as a gateway sends it) gets a request
// span that is that span's child, of kind server, carrying the GenAI
// attributes of the request and its outcome; a request without one gets a
// span of its own trace.
func TestRequestSpanJoinsCallerTrace(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ctx, cancel := context.WithCancel(context.Background())
	hub := broadcast.NewHub()
	cfg := driverConfig(0, 1)
	cfg.Tracer, cfg.TraceEvery = tp.Tracer("tpcoord"), 1000
	r := startRank(t, ctx, hub, cfg)
	requester := hub.Connect()
	t.Cleanup(func() { cancel(); _ = r.wait(t); requester.Close() })
	waitServing(t, requester, 1)

	// The caller's span, in another process's tracer as far as rank 0 knows.
	callerTP := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = callerTP.Shutdown(context.Background()) })
	cctx, caller := callerTP.Tracer("gateway").Start(context.Background(), "POST /v1/completions")
	defer caller.End()
	seed := uint64(42)
	params := api.DefaultParams()
	params.Temperature, params.TopP, params.TopK, params.Seed, params.IgnoreEOS = 0.7, 0.9, 20, &seed, true
	req := &api.GenerateRequest{PromptTokenIDs: []int32{3, 4, 5}, MaxTokens: 6, Params: params}
	gctx, gcancel := context.WithTimeout(cctx, 30*time.Second)
	defer gcancel()
	rep, err := client.Generate(client.WithHeader(gctx, traceHeader(cctx)), requester, drvSubj, req, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Generate(gctx, requester, drvSubj, &api.GenerateRequest{PromptTokenIDs: []int32{3}, MaxTokens: 1, Params: params}, nil); err != nil {
		t.Fatal(err)
	}
	// The reply is sent after the span has ended.
	spans := requestSpans(rec.Ended())
	if len(spans) != 2 {
		t.Fatalf("recorded %d request spans, want 2", len(spans))
	}
	s, own := spans[0], spans[1]
	if s.Parent().SpanID() != caller.SpanContext().SpanID() || s.SpanContext().TraceID() != caller.SpanContext().TraceID() || !s.Parent().IsRemote() {
		t.Errorf("request span's parent %v (trace %v), want the caller's span %v", s.Parent(), s.SpanContext().TraceID(), caller.SpanContext())
	}
	if own.Parent().IsValid() || own.SpanContext().TraceID() == caller.SpanContext().TraceID() {
		t.Errorf("request without a trace context: parent %v, want a root span of its own trace", own.Parent())
	}
	if s.Name() != "text_completion" || s.SpanKind() != trace.SpanKindServer || s.Status().Code != codes.Unset {
		t.Errorf("request span %q of kind %v, status %v; want text_completion, server, unset", s.Name(), s.SpanKind(), s.Status())
	}
	checkAttrs(t, s.Attributes(), map[attribute.Key]attribute.Value{
		"gen_ai.operation.name":          attribute.StringValue("text_completion"),
		"gen_ai.request.max_tokens":      attribute.IntValue(6),
		"gen_ai.request.temperature":     attribute.Float64Value(0.7),
		"gen_ai.request.top_p":           attribute.Float64Value(0.9),
		"gen_ai.request.top_k":           attribute.Float64Value(20),
		"gen_ai.request.seed":            attribute.Int64Value(42),
		"gen_ai.usage.input_tokens":      attribute.IntValue(3),
		"gen_ai.usage.output_tokens":     attribute.IntValue(len(rep.Tokens)),
		"gen_ai.response.finish_reasons": attribute.StringSliceValue([]string{rep.FinishReason}),
		"tpc.rank":                       attribute.IntValue(0),
	})
	if len(rep.Tokens) != 6 || rep.FinishReason != api.FinishLength {
		t.Errorf("reply %d tokens, finish %q; want 6, length", len(rep.Tokens), rep.FinishReason)
	}
}

// requestSpans are the request spans among spans, in the order they ended.
func requestSpans(spans []sdktrace.ReadOnlySpan) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == requestSpanName {
			out = append(out, s)
		}
	}
	return out
}

func checkAttrs(t *testing.T, got []attribute.KeyValue, want map[attribute.Key]attribute.Value) {
	t.Helper()
	have := map[attribute.Key]attribute.Value{}
	for _, a := range got {
		have[a.Key] = a.Value
	}
	for k, v := range want {
		if h, ok := have[k]; !ok || h.Type() != v.Type() || h.String() != v.String() {
			t.Errorf("attribute %s = %v (set %v), want %v", k, h.String(), ok, v.String())
		}
	}
}

// TestRequestSpanStatus: only a failed request marks its span as an error;
// a cancelled one records its finish reason and leaves the status unset.
func TestRequestSpanStatus(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	d := &Driver{cfg: DriverConfig{Tracer: tp.Tracer("t"), TraceEvery: 1}}
	for _, tc := range []struct {
		finish string
		err    error
		want   codes.Code
	}{
		{api.FinishError, errors.New("worker died"), codes.Error},
		{api.FinishCancelled, errors.New("cancelled by the client"), codes.Unset},
		{api.FinishStop, nil, codes.Unset},
	} {
		r := &Request{Prompt: []int32{1}, MaxTokens: 2, Output: []int32{5}, Params: api.DefaultParams()}
		d.requestStarted(r)
		endSpan(r, tc.finish, tc.err, time.Now())
		endSpan(r, tc.finish, tc.err, time.Now()) // a second end is a no-op
		spans := rec.Ended()
		if len(spans) == 0 {
			t.Fatalf("%s: no span ended", tc.finish)
		}
		s := spans[len(spans)-1]
		if s.Status().Code != tc.want {
			t.Errorf("%s: status %v, want %v", tc.finish, s.Status(), tc.want)
		}
		checkAttrs(t, s.Attributes(), map[attribute.Key]attribute.Value{
			"gen_ai.response.finish_reasons": attribute.StringSliceValue([]string{tc.finish}),
			"gen_ai.usage.output_tokens":     attribute.IntValue(1),
		})
	}
	if n := len(rec.Ended()); n != 3 {
		t.Errorf("%d spans ended, want 3", n)
	}
}
