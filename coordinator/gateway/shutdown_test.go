package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tpcoord/tpcoord/internal/poll"
)

// sseTail reads a stream's events to its end and returns them, and
// whether [DONE] ended it (rather than the connection closing).
func sseTail(r *bufio.Reader) (events []string, done bool) {
	for {
		line, err := r.ReadString('\n')
		if data, ok := strings.CutPrefix(strings.TrimSpace(line), "data: "); ok {
			if data == "[DONE]" {
				return events, true
			}
			events = append(events, data)
		}
		if err != nil {
			return events, false
		}
	}
}

// lastError is the error object of a stream's last event, if it is one.
func lastError(events []string) (errorObject, bool) {
	if len(events) == 0 {
		return errorObject{}, false
	}
	var b errorBody
	if json.Unmarshal([]byte(events[len(events)-1]), &b) != nil || b.Error.Message == "" {
		return errorObject{}, false
	}
	return b.Error, true
}

// Serve's shutdown ends the streams still open after the grace with an
// error event and [DONE], never by closing their connections unsaid; a
// request not yet answered gets a 503. Each is cancelled at rank 0.
func TestShutdownEndsOpenStreams(t *testing.T) {
	g, f := newTestGateway(t, strings.Repeat("x", 100), func(c *Config) { c.Listen = "127.0.0.1:0" })
	g.grace = 100 * time.Millisecond
	f.hold = make(chan struct{})
	ln, err := Listen(g.cfg)
	if err != nil {
		t.Fatal(err)
	}
	url := URL(g.cfg, ln)
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- g.Serve(ctx, ln) }()
	req, _ := http.NewRequest(http.MethodPost, url+"/completions", strings.NewReader(`{"prompt":[1],"max_tokens":100,"stream":true}`))
	resp, err := http.DefaultClient.Do(reqAfterToken(f, req))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body := bufio.NewReader(resp.Body)
	if _, err := body.ReadString('\n'); err != nil { // the first token's event
		t.Fatal(err)
	}
	waiting := make(chan *http.Response, 1)
	go func() {
		resp, err := http.Post(url+"/completions", "application/json", strings.NewReader(`{"prompt":[2],"max_tokens":100,"stream":true}`))
		if err != nil {
			t.Error(err)
		}
		waiting <- resp
	}()
	poll.Until(t, 10*time.Second, "the second request at rank 0", func() bool { return len(f.requests()) == 2 })
	stop()
	events, done := sseTail(body)
	if e, ok := lastError(events); !done || !ok || e.Code == nil || *e.Code != "shutting_down" {
		t.Fatalf("stream after the shutdown: events %q, [DONE] %v; want an error event (shutting_down), then [DONE]", events, done)
	}
	if w := <-waiting; w != nil {
		defer w.Body.Close()
		if e := decode[errorBody](t, w); w.StatusCode != http.StatusServiceUnavailable || e.Error.Code == nil || *e.Error.Code != "shutting_down" {
			t.Errorf("request not yet answered at the shutdown: %d %+v, want 503 shutting_down", w.StatusCode, e.Error)
		}
	}
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(g.grace + EndGrace + 5*time.Second):
		t.Fatal("Serve did not return")
	}
	if n := f.cancels(); n != 2 {
		t.Errorf("rank 0 got %d cancels, want 2", n)
	}
}

// A stream whose rank 0 goes away mid-stream (restarted without the
// request: its keepalives are answered "not known") ends with an error
// event and [DONE] when the gateway does not resubmit (--resume-window 0).
func TestUpstreamLostEndsStream(t *testing.T) {
	g, f := newTestGateway(t, strings.Repeat("x", 100), func(c *Config) { c.ResumeWindow = 0 })
	f.hold = make(chan struct{})
	srv := serve(t, g)
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/completions", strings.NewReader(`{"prompt":[1],"max_tokens":100,"stream":true}`))
	resp, err := srv.Client().Do(reqAfterToken(f, req))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body := bufio.NewReader(resp.Body)
	if _, err := body.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	close(f.lost)
	events, done := sseTail(body)
	if e, ok := lastError(events); !done || !ok || e.Code == nil || *e.Code != "job_unavailable" {
		t.Fatalf("stream after rank 0 went away: events %q, [DONE] %v; want an error event (job_unavailable), then [DONE]", events, done)
	}
}
