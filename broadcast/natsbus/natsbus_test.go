package natsbus

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"go.uber.org/goleak"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/internal/poll"
)

// Every test shuts its servers down and waits (runServer), and closes its
// connections, so nothing of nats-server or nats.go may outlive the tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// runServer starts an embedded nats-server on a random loopback port; opts
// adds auth or TLS. The server is shut down, and waited for, at cleanup.
func runServer(t *testing.T, opts *server.Options) *server.Server {
	t.Helper()
	if opts == nil {
		opts = &server.Options{}
	}
	opts.Host, opts.Port, opts.NoSigs, opts.NoLog = "127.0.0.1", server.RANDOM_PORT, true, true
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready for connections")
	}
	return s
}

// clientURL is the server's URL with the nats:// scheme: TLS is then
// negotiated from the server's INFO and the Config's TLS settings, as it
// is for an agent given --nats nats://… and --nats-tls-*.
func clientURL(s *server.Server) string {
	return "nats://" + s.Addr().String()
}

func connect(t *testing.T, cfg Config) *Conn {
	t.Helper()
	c, err := Connect(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func recv(t *testing.T, ch <-chan *broadcast.Msg) *broadcast.Msg {
	t.Helper()
	select {
	case m := <-ch:
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("no message within 10s")
		return nil
	}
}

// collect subscribes and copies every message into a channel.
func collect(t *testing.T, c *Conn, subject string) <-chan *broadcast.Msg {
	t.Helper()
	ch := make(chan *broadcast.Msg, 64)
	unsub, err := c.Subscribe(subject, func(m *broadcast.Msg) {
		cp := *m
		cp.Data = append([]byte(nil), m.Data...)
		ch <- &cp
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unsub() })
	// The subscription must reach the server before anyone publishes.
	if err := c.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	return ch
}

func TestNATSPublishSubscribeKeepsHeaders(t *testing.T) {
	s := runServer(t, nil)
	sub := connect(t, Config{URL: s.ClientURL()})
	pub := connect(t, Config{URL: s.ClientURL()})
	ch := collect(t, sub, "tpc.job.step")

	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	if err := pub.Publish(&broadcast.Msg{Subject: "tpc.job.step", Header: map[string]string{"traceparent": tp}, Data: []byte("step 1")}); err != nil {
		t.Fatal(err)
	}
	if err := pub.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	m := recv(t, ch)
	if m.Subject != "tpc.job.step" || string(m.Data) != "step 1" {
		t.Fatalf("got %q on %q, want %q on %q", m.Data, m.Subject, "step 1", "tpc.job.step")
	}
	if got := m.Header["traceparent"]; got != tp {
		t.Fatalf("traceparent header = %q, want %q (headers %v)", got, tp, m.Header)
	}

	// Without headers the message carries none.
	if err := pub.Publish(&broadcast.Msg{Subject: "tpc.job.step", Data: []byte("step 2")}); err != nil {
		t.Fatal(err)
	}
	if m := recv(t, ch); string(m.Data) != "step 2" || len(m.Header) != 0 {
		t.Fatalf("got %q with headers %v, want %q and none", m.Data, m.Header, "step 2")
	}
}

func TestNATSWildcardSubscribe(t *testing.T) {
	s := runServer(t, nil)
	c := connect(t, Config{URL: s.ClientURL()})
	hbs := collect(t, c, "tpc.job.hb.*")
	all := collect(t, c, "tpc.job.>")

	// One connection's messages arrive in order, so once the last one is
	// in, anything the wildcard wrongly matched would already be queued.
	for _, subj := range []string{"tpc.job.step", "tpc.job.hb.2", "tpc.other.hb.1", "tpc.job.hb.3"} {
		if err := c.Publish(&broadcast.Msg{Subject: subj, Data: []byte(subj)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"tpc.job.hb.2", "tpc.job.hb.3"} {
		if m := recv(t, hbs); m.Subject != want {
			t.Fatalf("hb.* got %q, want %q", m.Subject, want)
		}
	}
	for _, want := range []string{"tpc.job.step", "tpc.job.hb.2", "tpc.job.hb.3"} {
		if m := recv(t, all); m.Subject != want {
			t.Fatalf("tpc.job.> got %q, want %q", m.Subject, want)
		}
	}
	if len(hbs) != 0 || len(all) != 0 {
		t.Fatalf("wildcards matched too much: %d and %d extra messages", len(hbs), len(all))
	}
}

func TestNATSRequestReply(t *testing.T) {
	s := runServer(t, nil)
	srv := connect(t, Config{URL: s.ClientURL()})
	cli := connect(t, Config{URL: s.ClientURL()})

	unsub, err := srv.Subscribe("tpc.job.replay", func(m *broadcast.Msg) {
		_ = srv.Publish(&broadcast.Msg{Subject: m.Reply, Data: append([]byte("re: "), m.Data...)})
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = unsub() }()
	if err := srv.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}

	a, b := cli.NewInbox(), cli.NewInbox()
	if a == b || !strings.HasPrefix(a, "_INBOX.") {
		t.Fatalf("inboxes %q and %q: want distinct _INBOX.… subjects", a, b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := broadcast.Request(ctx, cli, "tpc.job.replay", []byte("steps 5..9"))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "re: steps 5..9" {
		t.Fatalf("reply %q, want %q", got, "re: steps 5..9")
	}
}

func TestNATSRequestNoResponders(t *testing.T) {
	s := runServer(t, nil)
	c := connect(t, Config{URL: s.ClientURL()})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := broadcast.Request(ctx, c, "tpc.nobody.replay", []byte("x"))
	if !errors.Is(err, broadcast.ErrNoResponders) {
		t.Fatalf("request to an unserved subject: err = %v, want one wrapping ErrNoResponders", err)
	}
	if ctx.Err() != nil {
		t.Fatalf("no-responders answer took until the deadline: %v", err)
	}
}

func TestNATSFlush(t *testing.T) {
	s := runServer(t, nil)
	c := connect(t, Config{URL: s.ClientURL()})
	if err := c.Publish(&broadcast.Msg{Subject: "x", Data: []byte("y")}); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(context.Background()); err != nil {
		t.Fatalf("flush: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Flush(ctx); err == nil {
		t.Fatal("flush with a cancelled context succeeded")
	}
}

// After Close every Transport method fails with broadcast.ErrClosed, which
// the decode loop treats as a normal shutdown rather than an I/O error.
func TestNATSClosedConnReturnsErrClosed(t *testing.T) {
	s := runServer(t, nil)
	c := connect(t, Config{URL: s.ClientURL()})
	c.Close()
	if err := c.Publish(&broadcast.Msg{Subject: "x"}); !errors.Is(err, broadcast.ErrClosed) {
		t.Errorf("publish after close: %v, want ErrClosed", err)
	}
	if _, err := c.Subscribe("x", func(*broadcast.Msg) {}); !errors.Is(err, broadcast.ErrClosed) {
		t.Errorf("subscribe after close: %v, want ErrClosed", err)
	}
	if err := c.Flush(context.Background()); !errors.Is(err, broadcast.ErrClosed) {
		t.Errorf("flush after close: %v, want ErrClosed", err)
	}
}

// TestNATSPublishErrors: with the server gone, publishing fails with
// ErrNotSent, not ErrClosed (the connection is still reconnecting): on the
// dead socket, or once nats.go's reconnect buffer is full; a message over
// the server's max payload fails with neither.
func TestNATSPublishErrors(t *testing.T) {
	s := runServer(t, &server.Options{MaxPayload: 1 << 20})
	c := connect(t, Config{URL: s.ClientURL()})
	t.Cleanup(c.Close)
	err := c.Publish(&broadcast.Msg{Subject: "x", Data: make([]byte, 2<<20)})
	if err == nil || errors.Is(err, broadcast.ErrNotSent) || errors.Is(err, broadcast.ErrClosed) {
		t.Errorf("publish over the max payload: %v, want an error that is neither ErrNotSent nor ErrClosed", err)
	}
	// It names the sizes, so a client is told the request can never be sent.
	var tl *broadcast.TooLargeError
	if !errors.As(err, &tl) || tl.Size != 2<<20 || tl.Max != 1<<20 || !errors.Is(err, nats.ErrMaxPayload) {
		t.Errorf("publish over the max payload: %#v, want a TooLargeError of 2 MiB above 1 MiB wrapping nats.ErrMaxPayload", err)
	}
	s.Shutdown()
	s.WaitForShutdown()
	data := make([]byte, 64<<10)
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := c.Publish(&broadcast.Msg{Subject: "x", Data: data})
		if errors.Is(err, broadcast.ErrNotSent) {
			break
		}
		if err != nil || time.Now().After(deadline) {
			t.Fatalf("publishing with the server gone: %v, want ErrNotSent within 10s", err)
		}
	}
}

// TestSendErr: a write on a reset socket (what nats.go returns before it
// notices the connection died) is ErrNotSent too.
func TestSendErr(t *testing.T) {
	reset := &net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.ECONNRESET)}
	for _, tc := range []struct {
		err             error
		notSent, closed bool
	}{
		{reset, true, false},
		{&net.OpError{Op: "write", Net: "tcp", Err: os.ErrDeadlineExceeded}, true, false},
		{&net.OpError{Op: "write", Net: "tcp", Err: net.ErrClosed}, true, false},
		{syscall.EPIPE, true, false},
		{nats.ErrReconnectBufExceeded, true, false},
		{nats.ErrConnectionClosed, false, true},
		{nats.ErrMaxPayload, false, false},
		{nats.ErrBadSubject, false, false},
	} {
		got := sendErr(tc.err)
		if errors.Is(got, broadcast.ErrNotSent) != tc.notSent || errors.Is(got, broadcast.ErrClosed) != tc.closed || !errors.Is(got, tc.err) {
			t.Errorf("sendErr(%v) = %v: ErrNotSent %v, ErrClosed %v; want %v, %v", tc.err, got, errors.Is(got, broadcast.ErrNotSent), errors.Is(got, broadcast.ErrClosed), tc.notSent, tc.closed)
		}
	}
	if sendErr(nil) != nil {
		t.Error("sendErr(nil) != nil")
	}
}

func TestNATSOnClosedCalledOnceAfterClose(t *testing.T) {
	s := runServer(t, nil)
	var calls atomic.Int32
	c, err := Connect(Config{URL: s.ClientURL(), OnClosed: func() { calls.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("OnClosed called %d times before Close", n)
	}
	c.Close()
	poll.Until(t, 10*time.Second, "OnClosed called", func() bool { return calls.Load() > 0 })
	c.Close() // idempotent, and no second callback
	// The closed handler runs on nats.go's callback goroutine; goleak in
	// TestMain checks that it has exited, after which the count is final.
	// Meanwhile a second call would most likely show up here.
	if err := c.Flush(context.Background()); err == nil {
		t.Fatal("flush after close succeeded")
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("OnClosed called %d times, want 1", n)
	}
}

func TestAuthUserPassword(t *testing.T) {
	s := runServer(t, &server.Options{Users: []*server.User{{Username: "rank0", Password: "s3cret-pw"}}})
	good := writeFile(t, "pw", "s3cret-pw\n")
	bad := writeFile(t, "pw", "wrong-pw\n")
	missing := filepath.Join(t.TempDir(), "no-such-file")

	c := connect(t, Config{URL: s.ClientURL(), Auth: Auth{User: "rank0", PasswordFile: good}})
	if err := c.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name    string
		cfg     Config
		wantErr []string
	}{
		{"wrong password", Config{Auth: Auth{User: "rank0", PasswordFile: bad}}, []string{"uthorization"}},
		{"no credentials", Config{}, []string{"uthorization"}},
		{"missing password file", Config{Auth: Auth{User: "rank0", PasswordFile: missing}}, []string{"PasswordFile", "no-such-file"}},
		{"user without password file", Config{Auth: Auth{User: "rank0"}}, []string{"User", "password file"}},
		{"password file without user", Config{Auth: Auth{PasswordFile: good}}, []string{"User", "password file"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.URL = s.ClientURL()
			c, err := Connect(tc.cfg)
			if err == nil {
				c.Close()
				t.Fatal("connected")
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestAuthTokenInURL(t *testing.T) {
	s := runServer(t, &server.Options{Authorization: "tok-3f9a"})
	c := connect(t, Config{URL: "nats://tok-3f9a@" + s.Addr().String()})
	if err := c.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, err := Connect(Config{URL: "nats://wrong-token@" + s.Addr().String()})
	if err == nil {
		t.Fatal("connected with a wrong token")
	}
	if strings.Contains(err.Error(), "wrong-token") {
		t.Fatalf("connect error leaks the token: %v", err)
	}
}

func TestNkeySeed(t *testing.T) {
	user, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, err := user.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	seed, err := user.Seed()
	if err != nil {
		t.Fatal(err)
	}
	other, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	otherSeed, err := other.Seed()
	if err != nil {
		t.Fatal(err)
	}
	s := runServer(t, &server.Options{Nkeys: []*server.NkeyUser{{Nkey: pub}}})

	c := connect(t, Config{URL: clientURL(s), Auth: Auth{NKeySeedFile: writeFile(t, "user.nk", string(seed)+"\n")}})
	if err := c.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := Connect(Config{URL: clientURL(s), Auth: Auth{NKeySeedFile: writeFile(t, "other.nk", string(otherSeed))}}); err == nil {
		t.Fatal("connected with an unknown nkey")
	}
	_, err = Connect(Config{URL: clientURL(s), Auth: Auth{NKeySeedFile: filepath.Join(t.TempDir(), "missing.nk")}})
	if err == nil || !strings.Contains(err.Error(), "NKeySeedFile") {
		t.Fatalf("missing seed file: err = %v, want one naming NKeySeedFile", err)
	}
}

// pki is a CA with a server and a client certificate, as PEM files.
type pki struct {
	CA, ServerCert, ServerKey, ClientCert, ClientKey string
}

func newPKI(t *testing.T) pki {
	t.Helper()
	dir := t.TempDir()
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ca, caKey := newTestCA(t)
	sCert, sKey := newLeafCert(t, ca, caKey, 2, "nats-server", x509.ExtKeyUsageServerAuth)
	cCert, cKey := newLeafCert(t, ca, caKey, 3, "rank0", x509.ExtKeyUsageClientAuth)
	return pki{
		CA:         write("ca.pem", "CERTIFICATE", ca.Raw),
		ServerCert: write("server.pem", "CERTIFICATE", sCert),
		ServerKey:  write("server-key.pem", "PRIVATE KEY", sKey),
		ClientCert: write("client.pem", "CERTIFICATE", cCert),
		ClientKey:  write("client-key.pem", "PRIVATE KEY", cKey),
	}
}

func newTestKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// newTestCA returns a self-signed CA certificate, valid from an hour ago
// for a day, and its key.
func newTestCA(t *testing.T) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	now := time.Now()
	caKey := newTestKey(t)
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "tpcoord test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	return ca, caKey
}

// newLeafCert returns a certificate for 127.0.0.1 and localhost signed by
// ca, and its PKCS #8 key, both DER.
func newLeafCert(t *testing.T, ca *x509.Certificate, caKey *ecdsa.PrivateKey, serial int64, cn string, usage x509.ExtKeyUsage) (certDER, keyDER []byte) {
	t.Helper()
	k := newTestKey(t)
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:     []string{"localhost"},
	}
	certDER, err := x509.CreateCertificate(rand.Reader, tmpl, ca, k.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err = x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return certDER, keyDER
}

func TestMutualTLS(t *testing.T) {
	p := newPKI(t)
	tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: p.ServerCert, KeyFile: p.ServerKey, CaFile: p.CA, Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	s := runServer(t, &server.Options{TLSConfig: tc, TLS: true, TLSVerify: true, TLSTimeout: 5})

	c := connect(t, Config{URL: clientURL(s), Auth: Auth{TLSCA: p.CA, TLSCert: p.ClientCert, TLSKey: p.ClientKey}})
	if err := c.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !c.NATS().TLSRequired() {
		t.Fatal("connection is not using TLS")
	}
	if _, err := c.NATS().TLSConnectionState(); err != nil {
		t.Fatalf("TLS connection state: %v", err)
	}

	t.Run("without client certificate", func(t *testing.T) {
		c, err := Connect(Config{URL: clientURL(s), Auth: Auth{TLSCA: p.CA}})
		if err == nil {
			c.Close()
			t.Fatal("connected without a client certificate")
		}
	})
	t.Run("without CA", func(t *testing.T) {
		// The server's certificate is signed by a CA the system does not trust.
		c, err := Connect(Config{URL: clientURL(s), Auth: Auth{TLSCert: p.ClientCert, TLSKey: p.ClientKey}})
		if err == nil {
			c.Close()
			t.Fatal("connected without trusting the server's CA")
		}
	})
	for _, tc := range []struct {
		name string
		cfg  Config
		want []string
	}{
		{"nonexistent CA file", Config{Auth: Auth{TLSCA: filepath.Join(t.TempDir(), "no-ca.pem")}}, []string{"TLSCA", "no-ca.pem"}},
		{"nonexistent client cert", Config{Auth: Auth{TLSCA: p.CA, TLSCert: filepath.Join(t.TempDir(), "no-cert.pem"), TLSKey: p.ClientKey}}, []string{"TLSCert"}},
		{"nonexistent client key", Config{Auth: Auth{TLSCA: p.CA, TLSCert: p.ClientCert, TLSKey: filepath.Join(t.TempDir(), "no-key.pem")}}, []string{"TLSKey"}},
		{"cert without key", Config{Auth: Auth{TLSCA: p.CA, TLSCert: p.ClientCert}}, []string{"TLSCert", "a certificate and a key"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.URL = clientURL(s)
			c, err := Connect(tc.cfg)
			if err == nil {
				c.Close()
				t.Fatal("connected")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestNATSRedact(t *testing.T) {
	for _, tc := range []struct {
		in     string
		secret []string // must not appear in the output
		keep   []string // must appear in the output
	}{
		{"nats://127.0.0.1:4222", nil, []string{"nats://127.0.0.1:4222"}},
		{"nats://s3cr3t-token@127.0.0.1:4222", []string{"s3cr3t-token"}, []string{"127.0.0.1:4222"}},
		{"nats://rank0:hunter2@nats.example:4222", []string{"hunter2"}, []string{"rank0", "nats.example:4222"}},
		{"tls://rank0:hunter2@nats.example:4222", []string{"hunter2"}, []string{"tls://", "nats.example:4222"}},
		// nats.go takes a comma-separated list of servers.
		{"nats://a:pw-one@h1:4222,nats://b:pw-two@h2:4222", []string{"pw-one", "pw-two"}, []string{"h1:4222", "h2:4222"}},
		{"nats://tok-one@h1:4222, nats://tok-two@h2:4222", []string{"tok-one", "tok-two"}, []string{"h1:4222", "h2:4222"}},
		// A URL that does not parse must not be echoed with its secret.
		{"nats://rank0:bad%zzpw@h:4222", []string{"bad%zzpw", "zzpw"}, nil},
	} {
		got := Redact(tc.in)
		for _, s := range tc.secret {
			if strings.Contains(got, s) {
				t.Errorf("Redact(%q) = %q: leaks %q", tc.in, got, s)
			}
		}
		for _, k := range tc.keep {
			if !strings.Contains(got, k) {
				t.Errorf("Redact(%q) = %q: lost %q", tc.in, got, k)
			}
		}
	}
}

// A connect error names the server without its credentials.
func TestAuthConnectErrorRedactsURL(t *testing.T) {
	s := runServer(t, &server.Options{Users: []*server.User{{Username: "u", Password: "right-pw"}}})
	_, err := Connect(Config{URL: "nats://u:wrong-pw@" + s.Addr().String()})
	if err == nil {
		t.Fatal("connected with a wrong password")
	}
	if strings.Contains(err.Error(), "wrong-pw") {
		t.Fatalf("connect error leaks the password: %v", err)
	}
}
