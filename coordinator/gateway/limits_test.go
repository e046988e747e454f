package gateway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/broadcast/api"
)

// serveOn runs g's Serve on a free loopback port until the test ends and
// returns its address.
func serveOn(t *testing.T, g *Gateway) string {
	t.Helper()
	ln, err := Listen(g.cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- g.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String()
}

// rawRequest sends head (the request line and headers, without the blank
// line ending them) and then part of a body on a TCP connection it leaves
// open, and reads the answer, waiting at most within. It returns the
// answer, and a function reporting whether the server then closes the
// connection (within the same bound).
func rawRequest(t *testing.T, addr, head, part string, within time.Duration) (resp *http.Response, body string, closed func() bool) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := io.WriteString(conn, strings.ReplaceAll(head, "\n", "\r\n")+"\r\n\r\n"+part); err != nil {
		t.Fatal(err)
	}
	if err := conn.SetReadDeadline(time.Now().Add(within)); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer within %v: %v", within, err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the answer's body: %v", err)
	}
	return resp, string(b), func() bool {
		_, err := br.ReadByte()
		return errors.Is(err, io.EOF)
	}
}

// Finding 2: a body that stalls (shorter than its Content-Length, or
// chunked and never ended) is answered 408 within BodyTimeout, and its
// connection closed.
func TestStalledBodyIsAnswered408(t *testing.T) {
	const bound = 300 * time.Millisecond
	g, _ := newTestGateway(t, "ab", func(c *Config) { c.Listen, c.BodyTimeout = "127.0.0.1:0", bound })
	addr := serveOn(t, g)
	for _, tc := range []struct{ name, head, part string }{
		{"short of its Content-Length", "POST /v1/completions HTTP/1.1\nHost: x\nContent-Type: application/json\nContent-Length: 100", `{"prompt":[1],`},
		{"chunked, never ended", "POST /v1/completions HTTP/1.1\nHost: x\nContent-Type: application/json\nTransfer-Encoding: chunked", "e\r\n{\"prompt\":[1],\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			resp, body, closed := rawRequest(t, addr, tc.head, tc.part, 10*time.Second)
			took := time.Since(start)
			if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(body, "request_timeout") || !strings.Contains(body, "--body-timeout 300ms") {
				t.Fatalf("answer %d %s, want 408 request_timeout naming --body-timeout 300ms", resp.StatusCode, body)
			}
			if took < bound || took > bound+5*time.Second {
				t.Errorf("answered after %v, want about %v", took, bound)
			}
			if !resp.Close || !closed() {
				t.Error("the connection stayed open after the 408")
			}
		})
	}
}

// Finding 2: a request refused before its body is read (no API key; a
// Content-Length above the limit) is answered at once, whatever its body
// does; the connection closes after the answer.
func TestRefusedBeforeTheBody(t *testing.T) {
	g, _ := newTestGateway(t, "ab", func(c *Config) {
		c.Listen, c.BodyTimeout, c.APIKeys, c.MaxBodyBytes = "127.0.0.1:0", time.Minute, []string{"k"}, 4096
	})
	addr := serveOn(t, g)
	for _, tc := range []struct {
		name, head, part string
		status           int
		want             string
	}{
		{"no API key, a body that never ends", "POST /v1/completions HTTP/1.1\nHost: x\nTransfer-Encoding: chunked", "5\r\n{\"pro\r\n", http.StatusUnauthorized, "invalid_api_key"},
		{"wrong API key, short of its Content-Length", "POST /v1/completions HTTP/1.1\nHost: x\nAuthorization: Bearer nope\nContent-Length: 100", "{", http.StatusUnauthorized, "invalid_api_key"},
		{"Content-Length above the limit, no body sent", "POST /v1/completions HTTP/1.1\nHost: x\nAuthorization: Bearer k\nContent-Length: 100000000", "", http.StatusRequestEntityTooLarge, "larger than 4096 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			resp, body, _ := rawRequest(t, addr, tc.head, tc.part, 10*time.Second)
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("answered after %v, want at once", took)
			}
			if resp.StatusCode != tc.status || !strings.Contains(body, tc.want) {
				t.Fatalf("answer %d %s, want %d with %q", resp.StatusCode, body, tc.status, tc.want)
			}
			// The server closes the connection once the body's deadline
			// passes (a minute here): not waited for.
			if !resp.Close {
				t.Error("the answer does not close the connection")
			}
		})
	}
}

// Finding 3: a request larger than the bus's max payload gets 413 naming
// the limit, without Retry-After (it can never be sent); a small one runs.
func TestRequestAboveTheMaxPayload(t *testing.T) {
	hub := broadcast.NewHub()
	f := startFakeRank0(t, hub, "ab")
	hub.LimitPayload(2048)
	cfg := DefaultConfig()
	cfg.Model = "m"
	g, err := New(cfg, hub.Connect(), f.subj)
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, g)
	if resp := post(t, srv, "/v1/completions", `{"prompt":[1],"max_tokens":2}`); resp.StatusCode != http.StatusOK {
		t.Fatalf("a small request: status %d", resp.StatusCode)
	}
	prompt := "[" + strings.Repeat("100,", 999) + "100]"
	resp := post(t, srv, "/v1/completions", `{"prompt":`+prompt+`,"max_tokens":2,"n":2}`)
	e := decode[errorBody](t, resp)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || e.Error.Code == nil || *e.Error.Code != "request_too_large" ||
		!strings.Contains(e.Error.Message, "max_payload of 2048 bytes") {
		t.Fatalf("answer %d %+v, want 413 request_too_large naming the max payload", resp.StatusCode, e.Error)
	}
	if ra := resp.Header.Get("Retry-After"); ra != "" {
		t.Errorf("Retry-After %q on a request that can never be sent", ra)
	}
	if n := len(f.requests()); n != 1 {
		t.Errorf("rank 0 got %d requests, want only the small one", n)
	}
}

// Finding 4: every NATS request of an HTTP request with several choices
// carries their number, so rank 0 refuses for good (400 naming n) a group
// its queue could never hold together.
func TestChoicesDeclareTheirGroup(t *testing.T) {
	for _, tc := range []struct {
		body  string
		group int
	}{
		{`{"prompt":[1],"max_tokens":1}`, 0},
		{`{"prompt":[1],"max_tokens":1,"n":3}`, 3},
		{`{"prompt":[[1],[2]],"max_tokens":1,"n":2}`, 4},
	} {
		g, f := newTestGateway(t, "ab", nil)
		if resp := post(t, serve(t, g), "/v1/completions", tc.body); resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: status %d", tc.body, resp.StatusCode)
		}
		reqs := f.requests()
		for _, r := range reqs {
			if r.Group != tc.group {
				t.Errorf("%s: a NATS request's group %d, want %d", tc.body, r.Group, tc.group)
			}
		}
		if len(reqs) != max(tc.group, 1) {
			t.Errorf("%s: %d NATS requests, want %d", tc.body, len(reqs), max(tc.group, 1))
		}
	}
}

// Finding 1: a logit_bias larger than rank 0 takes is refused by the
// gateway with a 400 naming the field, before anything reaches rank 0.
func TestLogitBiasBoundedOverHTTP(t *testing.T) {
	g, f := newTestGateway(t, "ab", nil)
	var b strings.Builder
	b.WriteString(`{"prompt":[1],"max_tokens":1,"n":64,"logit_bias":{`)
	for i := range api.MaxLogitBias + 1 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"%d":-1`, i)
	}
	b.WriteString(`}}`)
	resp := post(t, serve(t, g), "/v1/completions", b.String())
	if e := decode[errorBody](t, resp); resp.StatusCode != http.StatusBadRequest || e.Error.Param == nil || *e.Error.Param != "logit_bias" ||
		!strings.Contains(e.Error.Message, "1025 entries, at most 1024") {
		t.Fatalf("status %d %+v, want 400 naming logit_bias and the numbers", resp.StatusCode, e.Error)
	}
	if n := len(f.requests()); n != 0 {
		t.Errorf("rank 0 got %d requests", n)
	}
}
