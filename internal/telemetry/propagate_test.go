package telemetry

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/rank/client"
)

// TestWithTraceHeader: under WithTraceHeader, client.Generate sends the
// trace context of ctx's span (traceparent, tracestate) with the request;
// without a span it sends no headers.
func TestWithTraceHeader(t *testing.T) {
	hub := broadcast.NewHub()
	subj := broadcast.Subjects{Prefix: "tpc", Job: "prop"}
	rank0, requester := hub.Connect(), hub.Connect()
	t.Cleanup(func() { rank0.Close(); requester.Close() })
	got := make(chan map[string]string, 2)
	if _, err := rank0.Subscribe(subj.Generate(), func(m *broadcast.Msg) {
		got <- m.Header
		data, _ := json.Marshal(client.GenerateReply{Done: true, FinishReason: client.FinishLength, Tokens: []int32{1}})
		_ = rank0.Publish(&broadcast.Msg{Subject: m.Reply, Data: data})
	}); err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ts, err := trace.ParseTraceState("gw=1")
	if err != nil {
		t.Fatal(err)
	}
	sctx, span := tp.Tracer("gw").Start(ctx, "POST")
	defer span.End()
	sc := span.SpanContext().WithTraceState(ts)
	sctx = trace.ContextWithSpanContext(sctx, sc)
	req := &client.GenerateRequest{PromptTokenIDs: []int32{1}, MaxTokens: 1}

	if _, err := client.Generate(WithTraceHeader(sctx), requester, subj, req, nil); err != nil {
		t.Fatal(err)
	}
	want := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"
	if h := <-got; h["traceparent"] != want || h["tracestate"] != "gw=1" {
		t.Fatalf("headers %v, want traceparent %s and tracestate gw=1", h, want)
	}
	if _, err := client.Generate(WithTraceHeader(ctx), requester, subj, req, nil); err != nil {
		t.Fatal(err)
	}
	if h := <-got; len(h) != 0 {
		t.Fatalf("without a span: headers %v, want none", h)
	}
}

// TestTracingFollowsCallerSampling: spans of this process's own traces are
// all sampled; a span whose parent came from a caller that did not sample
// its trace is not recorded.
func TestTracingFollowsCallerSampling(t *testing.T) {
	env := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}
	tr, err := newTracing(context.Background(), Config{}, Labels{Job: "j"}, func(k string) string { return env[k] }, slog.New(slog.DiscardHandler))
	if err != nil || tr == nil {
		t.Fatalf("newTracing = %v, %v", tr, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = tr.Shutdown(ctx) // the export fails (nothing listens): only sampling is tested
	})
	tracer := tr.Provider.Tracer("t")
	_, root := tracer.Start(context.Background(), "root")
	defer root.End()
	remote := func(flags trace.TraceFlags) context.Context {
		return trace.ContextWithRemoteSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: flags, Remote: true}))
	}
	_, sampled := tracer.Start(remote(trace.FlagsSampled), "child")
	defer sampled.End()
	_, unsampled := tracer.Start(remote(0), "child")
	defer unsampled.End()
	if !root.IsRecording() || !sampled.IsRecording() || unsampled.IsRecording() {
		t.Fatalf("recording: root %v, sampled parent %v, unsampled parent %v; want true, true, false",
			root.IsRecording(), sampled.IsRecording(), unsampled.IsRecording())
	}
}
