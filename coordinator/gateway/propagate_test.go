package gateway

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/rank/client"
)

// TestTraceHeader: under withTraceHeader, client.Generate sends the
// trace context of ctx's span (traceparent, tracestate) with the request;
// without a span it sends no headers.
func TestTraceHeader(t *testing.T) {
	hub := broadcast.NewHub()
	subj := broadcast.Subjects{Prefix: "tpc", Job: "prop"}
	rank0, requester := hub.Connect(), hub.Connect()
	t.Cleanup(func() { rank0.Close(); requester.Close() })
	got := make(chan map[string]string, 2)
	if _, err := rank0.Subscribe(subj.Generate(), func(m *broadcast.Msg) {
		got <- m.Header
		data, _ := json.Marshal(api.GenerateReply{Done: true, FinishReason: api.FinishLength, Tokens: []int32{1}})
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
	req := &api.GenerateRequest{PromptTokenIDs: []int32{1}, MaxTokens: 1}

	if _, err := client.Generate(withTraceHeader(sctx), requester, subj, req, nil); err != nil {
		t.Fatal(err)
	}
	want := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"
	if h := <-got; h["traceparent"] != want || h["tracestate"] != "gw=1" {
		t.Fatalf("headers %v, want traceparent %s and tracestate gw=1", h, want)
	}
	if _, err := client.Generate(withTraceHeader(ctx), requester, subj, req, nil); err != nil {
		t.Fatal(err)
	}
	if h := <-got; len(h) != 0 {
		t.Fatalf("without a span: headers %v, want none", h)
	}
}
