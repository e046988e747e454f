package serve

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// streamServer answers /v1/completions with three events of one token,
// each flushed on its own, then [DONE]; /bad/v1/completions with a 429.
func streamServer(t *testing.T, conns *atomic.Int64) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Content-Type") != "application/json" || r.ContentLength <= 0 {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 3 {
			fmt.Fprintf(w, "data: {\"choices\":[{\"token_ids\":[%d]}]}\n\n", i)
			w.(http.Flusher).Flush()
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
	})
	mux.HandleFunc("POST /bad/v1/completions", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprint(w, `{"error":{"message":"overloaded"}}`)
	})
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// The raw client reads a chunked SSE stream event by event and keeps its
// connection for the next request.
func TestRawSenderStreamsAndReuses(t *testing.T) {
	var conns atomic.Int64
	srv := streamServer(t, &conns)
	s, err := newRawSender(srv.URL+"/v1", model, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	for i := range 3 {
		got := 0
		if err := s.send(context.Background(), requestOf(i, 4096, 3, 1), func(n int) { got += n }); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if got != 3 {
			t.Fatalf("request %d: %d tokens, want 3", i, got)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections for 3 requests, want 1 kept alive", n)
	}
}

func TestRawSenderErrors(t *testing.T) {
	var conns atomic.Int64
	srv := streamServer(t, &conns)
	s, err := newRawSender(srv.URL+"/bad/v1", model, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	err = s.send(context.Background(), requestOf(0, 4096, 3, 1), func(int) {})
	if err == nil || !strings.Contains(err.Error(), "HTTP 429") || !strings.Contains(err.Error(), "overloaded") {
		t.Errorf("429: error %v, want HTTP 429 with the message", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s2, _ := newRawSender(srv.URL+"/v1", model, 1)
	if err := s2.send(ctx, requestOf(0, 4096, 3, 1), func(int) {}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: error %v, want context.Canceled", err)
	}
	for _, u := range []string{"https://x/v1", "::", "http:///v1"} {
		if _, err := newRawSender(u, model, 1); err == nil {
			t.Errorf("newRawSender(%q): no error", u)
		}
	}
}
