package telemetry

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
)

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
