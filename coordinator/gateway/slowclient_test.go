package gateway

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tpcoord/tpcoord/internal/poll"
)

// smallBuffers makes each accepted connection's send buffer small, so
// that a client that does not read blocks the server's writes soon.
type smallBuffers struct{ net.Listener }

func (l smallBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(1024)
	}
	return c, err
}

// stalledClient sends a streaming completion of n tokens over a
// connection with a small receive buffer, and never reads the answer.
func stalledClient(t *testing.T, srv *httptest.Server, n int) net.Conn {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 1024) })
	}}
	c, err := d.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	body := fmt.Sprintf(`{"model":"m","prompt":"x","max_tokens":%d,"stream":true}`, n)
	if _, err := fmt.Fprintf(c, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body); err != nil {
		t.Fatal(err)
	}
	return c
}

func slowClientGateway(t *testing.T, n int, stall time.Duration) (*Gateway, *fakeRank0, *httptest.Server) {
	g, f := newTestGateway(t, strings.Repeat("x", n), nil, WithTokenizer(byteTokenizer{}))
	g.stall = stall
	f.hold = make(chan struct{})
	srv := httptest.NewUnstartedServer(g.Handler())
	srv.Listener = smallBuffers{srv.Listener}
	srv.Start()
	t.Cleanup(srv.Close)
	return g, f, srv
}

// tokens lets the fake rank 0 send n tokens.
func tokens(t *testing.T, f *fakeRank0, n int) {
	t.Helper()
	for i := range n {
		select {
		case f.hold <- struct{}{}:
		case <-time.After(10 * time.Second):
			t.Fatalf("rank 0 took %d tokens of %d", i, n)
		}
	}
}

// inFlight is tpcoord_gateway_requests_in_flight as /metrics shows it.
func inFlight(g *Gateway) string {
	rec := httptest.NewRecorder()
	g.metrics.handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for line := range strings.Lines(rec.Body.String()) {
		if v, ok := strings.CutPrefix(line, `tpcoord_gateway_requests_in_flight{model_name="m"} `); ok {
			return strings.TrimSpace(v)
		}
	}
	return "absent"
}

// TestSlowClientDoesNotHoldTheRequest: a streaming client that stops
// reading does not stall its request: the gateway goes on reading rank 0's
// replies and sending keepalives (so rank 0 would not cancel it as gone),
// and once rank 0 ends the request the in-flight gauge falls, the client
// still not reading. (Tokens were written to the client on the goroutine
// that reads the replies: a blocked write stopped the keepalives, rank 0
// cancelled the request as "client went away", and the gauge stayed up
// for as long as the write blocked.)
func TestSlowClientDoesNotHoldTheRequest(t *testing.T) {
	g, f, srv := slowClientGateway(t, 600, time.Minute)
	stalledClient(t, srv, 600)
	tokens(t, f, 500) // far more than the connection's buffers hold
	k := f.keepalivesSeen()
	poll.Until(t, 10*time.Second, "keepalives go on while the client does not read", func() bool { return f.keepalivesSeen() >= k+3 })
	tokens(t, f, 100) // rank 0 ends the request
	poll.UntilDetail(t, 10*time.Second, "the in-flight gauge at 0 once rank 0 ended the request", func() (bool, string) {
		v := inFlight(g)
		return v == "0", v
	})
	if n := f.cancels(); n != 0 {
		t.Errorf("%d cancels: the request was not to be cancelled", n)
	}
}

// TestStalledClientIsDropped: a client that takes no bytes for the stall
// bound is gone: its request is cancelled at rank 0, and leaves the gauge.
func TestStalledClientIsDropped(t *testing.T) {
	g, f, srv := slowClientGateway(t, 600, 300*time.Millisecond)
	stalledClient(t, srv, 600)
	tokens(t, f, 500)
	poll.Until(t, 10*time.Second, "rank 0 gets the cancel", func() bool { return f.cancels() > 0 })
	tokens(t, f, 1) // rank 0 goes on: it sees the cancel and answers it
	poll.Until(t, 10*time.Second, "the in-flight gauge at 0", func() bool { return inFlight(g) == "0" })
}
