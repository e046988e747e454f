package client

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/broadcast/api"
)

// TestGenerateSendsHeader: the headers set with WithHeader (a caller's
// trace context) travel with the generate request's message, and only
// with it; a request without them carries none.
func TestGenerateSendsHeader(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	hub := broadcast.NewHub()
	subj := broadcast.Subjects{Prefix: "tpc", Job: "hdr"}
	rank0, requester := hub.Connect(), hub.Connect()
	t.Cleanup(func() { rank0.Close(); requester.Close() })
	got := make(chan map[string]string, 2)
	// A stand-in for rank 0 that records the request's headers and ends
	// the request at once.
	if _, err := rank0.Subscribe(subj.Generate(), func(m *broadcast.Msg) {
		got <- m.Header
		data, _ := json.Marshal(api.GenerateReply{Done: true, FinishReason: api.FinishLength, Tokens: []int32{1}})
		_ = rank0.Publish(&broadcast.Msg{Subject: m.Reply, Data: data})
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := &api.GenerateRequest{PromptTokenIDs: []int32{1}, MaxTokens: 1}

	hctx := WithHeader(ctx, map[string]string{"traceparent": tp})
	hctx = WithHeader(hctx, map[string]string{"tracestate": "k=v"})
	if _, err := Generate(hctx, requester, subj, req, nil); err != nil {
		t.Fatal(err)
	}
	if h := <-got; h["traceparent"] != tp || h["tracestate"] != "k=v" || len(h) != 2 {
		t.Fatalf("generate request headers %v, want traceparent %q and tracestate k=v", h, tp)
	}
	if _, err := Generate(ctx, requester, subj, req, nil); err != nil {
		t.Fatal(err)
	}
	if h := <-got; len(h) != 0 {
		t.Fatalf("request without WithHeader carried headers %v", h)
	}
}
