//go:build !agentonly

package natsbus

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/internal/freeport"
)

func serve(t *testing.T, rawURL string) *Server {
	t.Helper()
	s, err := Serve(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func TestServeTokenRequired(t *testing.T) {
	s := serve(t, "nats://s3cret@127.0.0.1:0")
	u, err := url.Parse(s.URL())
	if err != nil || u.User.Username() != "s3cret" || u.Port() == "0" {
		t.Fatalf("URL() = %q: want the token and the port picked", s.URL())
	}
	connect(t, Config{URL: s.URL()}) // with the token
	_, err = Connect(Config{URL: "nats://" + u.Host})
	if !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("connect without the token: err = %v, want an authorization error", err)
	}
	_, err = Connect(Config{URL: "nats://wrong@" + u.Host})
	if !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("connect with a wrong token: err = %v, want an authorization error", err)
	}
}

func TestServeUserPassword(t *testing.T) {
	s := serve(t, "nats://rank0:pw@127.0.0.1:0")
	connect(t, Config{URL: s.URL()})
	u, _ := url.Parse(s.URL())
	if _, err := Connect(Config{URL: "nats://rank0:nope@" + u.Host}); !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("wrong password: err = %v, want an authorization error", err)
	}
}

func TestServeLoopbackHasToken(t *testing.T) {
	s, err := ServeLoopback()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	u, _ := url.Parse(s.URL())
	if len(u.User.Username()) != 32 || u.Hostname() != "127.0.0.1" {
		t.Fatalf("URL() = %s: want a 32-hex-digit token on 127.0.0.1", Redact(s.URL()))
	}
	c, err := Connect(Config{URL: s.URL()})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}

func TestServeRefusesBadURLs(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"nats://0.0.0.0:0", "without credentials"},
		{"nats://10.1.2.3:4222", "without credentials"},
		{"tls://tok@127.0.0.1:0", "scheme"},
		{"nats://tok@127.0.0.1", "host and port"},
		{"nats://tok@:4222", "host and port"},
		{"nats://tok@127.0.0.1:0/x", "no path"},
		{"nats://tok@127.0.0.1:99999", "host and port"},
		{"::", "not a URL"},
		{"nats://@0.0.0.0:4222", "empty token"},
		{"nats://:secret@0.0.0.0:4222", "empty token, user or password"},
		{"nats://u:@127.0.0.1:0", "empty token, user or password"},
		{"nats://tok@127.0.0.1:42x2", "not a URL"},
	} {
		_, err := Serve(tc.url)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "nats-serve:") {
			t.Errorf("Serve(%q) = %v, want an error naming nats-serve and %q", tc.url, err, tc.want)
		}
		if err != nil && (strings.Contains(err.Error(), "tok@") || strings.Contains(err.Error(), "secret")) {
			t.Errorf("Serve(%q): error shows the token: %v", tc.url, err)
		}
	}
}

func TestServePortInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, err = Serve("nats://tok@" + ln.Addr().String())
	if err == nil || !strings.Contains(err.Error(), ln.Addr().String()) {
		t.Fatalf("Serve on a port in use: err = %v, want one naming the address", err)
	}
}

// An in-process connection never touches the URL's address: here nothing
// listens there, yet publishing reaches a subscriber on a TCP connection.
func TestInProcessConnection(t *testing.T) {
	s := serve(t, "nats://tok@127.0.0.1:0")
	sub := connect(t, Config{URL: s.URL()})
	ch := collect(t, sub, "tpc.j.step")

	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()
	pub := connect(t, Config{URL: "nats://tok@" + deadAddr, InProcess: s, WriteThrough: true})
	if err := pub.Publish(&broadcast.Msg{Subject: "tpc.j.step", Data: []byte("k1"), Header: map[string]string{"traceparent": "x"}}); err != nil {
		t.Fatal(err)
	}
	m := recv(t, ch)
	if string(m.Data) != "k1" || m.Header["traceparent"] != "x" {
		t.Fatalf("got %q %v", m.Data, m.Header)
	}
}

// With WriteThrough a publish has left nats.go's buffer when it returns;
// nothing waits for the flusher goroutine.
func TestWriteThroughLeavesNothingBuffered(t *testing.T) {
	s := serve(t, "nats://tok@127.0.0.1:0")
	for _, inproc := range []*Server{nil, s} {
		pub := connect(t, Config{URL: s.URL(), InProcess: inproc, WriteThrough: true})
		for i := range 200 {
			if err := pub.Publish(&broadcast.Msg{Subject: "tpc.j.step", Data: make([]byte, 256)}); err != nil {
				t.Fatal(err)
			}
			if n, err := pub.NATS().Buffered(); err != nil || n != 0 {
				t.Fatalf("in-process %v, publish %d: %d bytes still buffered (err %v)", inproc != nil, i, n, err)
			}
		}
	}
}

// ConnectWait keeps trying while nothing listens, connects once a server
// starts there, and gives up with a clear error at its deadline.
func TestConnectWait(t *testing.T) {
	// Outside the kernel's ephemeral range, so that no connect's source
	// port (the test's own dials included) takes it (see freeport).
	port, err := freeport.Pick("127.0.0.1", false)
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	if _, err := ConnectWait(context.Background(), Config{URL: "nats://tok@" + addr}, 300*time.Millisecond); err == nil || !strings.Contains(err.Error(), "no NATS server answered within 300ms") {
		t.Fatalf("nothing listening: err = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := ConnectWait(ctx, Config{URL: "nats://tok@" + addr}, time.Minute); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: err = %v", err)
	}

	type result struct {
		c   *Conn
		err error
	}
	done := make(chan result, 1)
	go func() {
		c, err := ConnectWait(context.Background(), Config{URL: "nats://tok@" + addr}, time.Minute)
		done <- result{c, err}
	}()
	s := serve(t, "nats://tok@"+addr) // started after the client began waiting
	var r result
	select {
	case r = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("ConnectWait did not connect within 30s of the server starting")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.c.Close()
	if !r.c.Connected() || s.NumClients() != 1 {
		t.Fatalf("connected %v, server clients %d", r.c.Connected(), s.NumClients())
	}
	// Authorization errors are not retried.
	if _, err := ConnectWait(context.Background(), Config{URL: "nats://wrong@" + addr}, time.Minute); !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("wrong token: err = %v", err)
	}
}

func TestUnreachable(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nats.ErrNoServers, true},
		{fmt.Errorf("connect: %w", &net.DNSError{Err: "no such host", Name: "rank0"}), true},
		{&net.OpError{Op: "dial", Err: syscall.EHOSTUNREACH}, true},
		{nats.ErrTimeout, true},
		{fmt.Errorf("connect: %w", nats.ErrAuthorization), false},
		{errors.New("nats-tls-ca: no such file"), false},
	} {
		if got := unreachable(tc.err); got != tc.want {
			t.Errorf("unreachable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
	// A name that cannot resolve is retried until the deadline, not
	// returned at once.
	_, err := ConnectWait(context.Background(), Config{URL: "nats://tok@no-such-host.invalid:4222"}, 600*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "no NATS server answered within 600ms") {
		t.Fatalf("unresolvable host: err = %v", err)
	}
}
