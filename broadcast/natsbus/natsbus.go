// Package natsbus implements broadcast.Transport over NATS (nats.go).
package natsbus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/internal/fielderr"
)

// Config is how an agent or client connects to NATS.
type Config struct {
	URL  string
	Name string // client name shown by the server's monitoring
	// PendingMsgs bounds each subscription's queue; a consumer that falls
	// this far behind is a slow consumer and its messages are dropped,
	// which the decode loop then sees as a gap.
	PendingMsgs int
	Logger      *slog.Logger

	// Authentication and TLS; all optional. The URL may carry a token or
	// user:password instead.
	Auth

	// OnClosed is called once when the connection is closed for good
	// (reconnects exhausted, or Close).
	OnClosed func()

	// InProcess, if set, connects to this embedded server through an
	// in-process pipe instead of a socket (URL still supplies the
	// credentials).
	InProcess *Server
	// WriteThrough makes every publish write to the connection in the
	// publishing goroutine. By default nats.go buffers a publish and its
	// flusher goroutine writes it, which costs a goroutine wake-up (on a
	// busy small host, a thread wake-up) on the way out. Rank 0 publishes
	// one latency-critical step per step, so it writes through; clients
	// that stream many small messages keep the default batching.
	WriteThrough bool
}

// Auth is how a connection authenticates, and its TLS.
type Auth struct {
	CredsFile    string // NATS credentials file (JWT + nkey seed)
	User         string // user name, with PasswordFile
	PasswordFile string // file holding the password (trailing newline ignored)
	NKeySeedFile string // nkey seed file
	TLSCA        string // CA bundle to verify the server
	TLSCert      string // client certificate, with TLSKey
	TLSKey       string
}

// authOptions turns the auth and TLS settings into nats.go options; errors
// name the Auth field.
func (cfg Auth) authOptions() ([]nats.Option, error) {
	var opts []nats.Option
	if cfg.CredsFile != "" {
		if _, err := os.Stat(cfg.CredsFile); err != nil {
			return nil, fielderr.New("CredsFile", "%w", err)
		}
		opts = append(opts, nats.UserCredentials(cfg.CredsFile))
	}
	if (cfg.User == "") != (cfg.PasswordFile == "") {
		return nil, fielderr.New("User", "give a user and a password file, or neither")
	}
	if cfg.User != "" {
		pw, err := os.ReadFile(cfg.PasswordFile)
		if err != nil {
			return nil, fielderr.New("PasswordFile", "%w", err)
		}
		opts = append(opts, nats.UserInfo(cfg.User, strings.TrimRight(string(pw), "\r\n")))
	}
	if cfg.NKeySeedFile != "" {
		o, err := nats.NkeyOptionFromSeed(cfg.NKeySeedFile)
		if err != nil {
			return nil, fielderr.New("NKeySeedFile", "%w", err)
		}
		opts = append(opts, o)
	}
	if cfg.TLSCA != "" {
		if _, err := os.Stat(cfg.TLSCA); err != nil {
			return nil, fielderr.New("TLSCA", "%w", err)
		}
		opts = append(opts, nats.RootCAs(cfg.TLSCA))
	}
	if (cfg.TLSCert == "") != (cfg.TLSKey == "") {
		return nil, fielderr.New("TLSCert", "give a certificate and a key, or neither")
	}
	if cfg.TLSCert != "" {
		for field, f := range map[string]string{"TLSCert": cfg.TLSCert, "TLSKey": cfg.TLSKey} {
			if _, err := os.Stat(f); err != nil {
				return nil, fielderr.New(field, "%w", err)
			}
		}
		opts = append(opts, nats.ClientCert(cfg.TLSCert, cfg.TLSKey))
	}
	return opts, nil
}

// DefaultConfig returns settings that notice a dead server within seconds.
func DefaultConfig() Config {
	return Config{URL: nats.DefaultURL, Name: "tpcoord", PendingMsgs: 65536}
}

// Conn is a broadcast.Transport over one NATS connection.
type Conn struct {
	nc       *nats.Conn
	log      *slog.Logger
	pending  int
	refusals refusals
}

var _ broadcast.Transport = (*Conn)(nil)

// Connect dials cfg.URL. The URL may carry a token or user:password.
func Connect(cfg Config) (*Conn, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.PendingMsgs <= 0 {
		cfg.PendingMsgs = DefaultConfig().PendingMsgs
	}
	opts, err := cfg.authOptions()
	if err != nil {
		return nil, err
	}
	onClosed := cfg.OnClosed
	if onClosed == nil {
		onClosed = func() {}
	}
	if cfg.InProcess != nil {
		opts = append(opts, nats.InProcessServer(cfg.InProcess.srv))
	}
	if cfg.WriteThrough {
		// A flush threshold of one byte: appendBufs writes in place.
		opts = append(opts, nats.WriteBufferSize(1))
	}
	c := &Conn{log: log, pending: cfg.PendingMsgs}
	nc, err := nats.Connect(cfg.URL, append(opts,
		nats.Name(cfg.Name),
		nats.ClosedHandler(func(*nats.Conn) { onClosed() }),
		nats.Timeout(5*time.Second),
		nats.PingInterval(2*time.Second),
		nats.MaxPingsOutstanding(2),
		nats.ReconnectWait(250*time.Millisecond),
		nats.MaxReconnects(40),
		nats.ErrorHandler(func(_ *nats.Conn, s *nats.Subscription, err error) {
			subj := ""
			if s != nil {
				subj = s.Subject
			}
			if c.refusals.observe(err) {
				// A watcher reports it, to the one who waits for it.
				log.Debug("nats refused a publish", "err", err)
				return
			}
			log.Warn("nats async error", "subject", subj, "err", err)
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) {
			log.Info("nats reconnected", "url", c.ConnectedUrlRedacted())
		}),
	)...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w", Redact(cfg.URL), err)
	}
	c.nc = nc
	return c, nil
}

// NATS returns the underlying connection.
func (c *Conn) NATS() *nats.Conn { return c.nc }

// Publish sends m without waiting for the server; once the connection is
// closed for good its error wraps broadcast.ErrClosed; a message over the
// server's max payload gets a *broadcast.TooLargeError.
func (c *Conn) Publish(m *broadcast.Msg) error {
	nm := &nats.Msg{Subject: m.Subject, Reply: m.Reply, Data: m.Data}
	if len(m.Header) > 0 {
		nm.Header = nats.Header{}
		for k, v := range m.Header {
			nm.Header.Set(k, v)
		}
	}
	err := c.nc.PublishMsg(nm)
	if errors.Is(err, nats.ErrMaxPayload) {
		return &broadcast.TooLargeError{Size: len(m.Data), Max: c.MaxPayload(), Err: err}
	}
	return sendErr(err)
}

// Subscribe calls fn for every message on subject. A subscriber that falls
// behind by more than Config.PendingMsgs messages (or 256 MiB) loses
// messages rather than queueing without bound; on the step subject the
// decode loop sees the gap and asks rank 0 for a replay.
func (c *Conn) Subscribe(subject string, fn func(*broadcast.Msg)) (func() error, error) {
	sub, err := c.nc.Subscribe(subject, func(nm *nats.Msg) {
		m := broadcast.Msg{Subject: nm.Subject, Reply: nm.Reply, Data: nm.Data}
		if len(nm.Header) > 0 {
			m.Header = make(map[string]string, len(nm.Header))
			for k := range nm.Header {
				m.Header[k] = nm.Header.Get(k)
			}
		}
		fn(&m)
	})
	if err != nil {
		return nil, fmt.Errorf("subscribe %s: %w", subject, closedErr(err))
	}
	if err := sub.SetPendingLimits(c.pending, 256<<20); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("subscribe %s: pending limits: %w", subject, err)
	}
	return sub.Unsubscribe, nil
}

// NewInbox returns a fresh, unique reply subject; the caller subscribes to
// it before publishing the request whose replies it receives.
func (c *Conn) NewInbox() string { return c.nc.NewRespInbox() }

// Flush waits for the server to acknowledge everything sent so far; without
// a deadline on ctx it gives up after 10 seconds.
func (c *Conn) Flush(ctx context.Context) error {
	// nats.go may see the server's answer before it looks at a context
	// that was already done, and report success.
	if err := ctx.Err(); err != nil {
		return err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
	}
	return closedErr(c.nc.FlushWithContext(ctx))
}

// sendErr classifies a publish error: a closed connection wraps
// broadcast.ErrClosed; a write that failed on a socket nats.go has not yet
// seen die, or a reconnect buffer that is full, wraps broadcast.ErrNotSent
// (nats.go reconnects by itself); anything else (a bad subject, a message
// over the server's limit) is returned as it is. A write timeout is a
// net.Error too, so it is ErrNotSent: nats.go closes a connection whose
// write failed part way, and its pings find a stuck one; a Config with
// WriteThrough may block the publisher that long.
func sendErr(err error) error {
	var ne net.Error
	switch {
	case err == nil:
		return nil
	case errors.Is(err, nats.ErrReconnectBufExceeded), errors.As(err, &ne), errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.ECONNRESET):
		return fmt.Errorf("%w: %w", broadcast.ErrNotSent, err)
	}
	return closedErr(err)
}

// closedErr makes nats.go's "connection closed" match broadcast.ErrClosed,
// which callers treat as a normal shutdown (broadcast.Transport's contract).
func closedErr(err error) error {
	if errors.Is(err, nats.ErrConnectionClosed) {
		return fmt.Errorf("%w: %w", broadcast.ErrClosed, err)
	}
	return err
}

// Close drains nothing: the decode loop has already stopped when it is
// called, and a closed agent must not keep publishing.
func (c *Conn) Close() { c.nc.Close() }

// Redact hides a token or password in a URL for logs and errors. raw may
// be a comma-separated list of servers, as nats.go accepts.
func Redact(raw string) string {
	parts := strings.Split(raw, ",")
	for i, p := range parts {
		parts[i] = redactOne(strings.TrimSpace(p))
	}
	return strings.Join(parts, ",")
}

func redactOne(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || (u.User == nil && strings.Contains(raw, "@")) {
		// Not a URL Go can parse (nats.go may still try it): drop whatever
		// precedes the last "@" rather than echo a secret.
		i := strings.LastIndexByte(raw, '@')
		if i < 0 {
			return raw
		}
		scheme := ""
		if j := strings.Index(raw, "://"); j >= 0 && j < i {
			scheme = raw[:j+3]
		}
		return scheme + "REDACTED@" + raw[i+1:]
	}
	if u.User == nil {
		return raw
	}
	if _, ok := u.User.Password(); !ok {
		u.User = url.User("REDACTED")
	}
	return u.Redacted()
}

// Connected reports whether the connection is up (not reconnecting).
func (c *Conn) Connected() bool { return c.nc.IsConnected() }

// MaxPayload is the largest message the server accepts.
func (c *Conn) MaxPayload() int { return int(c.nc.MaxPayload()) }

// ConnectWait is Connect, retried while no server answers (one may still
// be starting: rank 0 hosting it, a restarting service, a host whose name
// does not resolve yet) until ctx ends or timeout passes. Other errors
// (authorization, TLS, configuration) return at once. It logs progress
// every 5 seconds.
func ConnectWait(ctx context.Context, cfg Config, timeout time.Duration) (*Conn, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	start := time.Now()
	deadline := start.Add(timeout)
	lastLog := start
	for {
		c, err := Connect(cfg)
		if err == nil || !unreachable(err) {
			return c, err
		}
		now := time.Now()
		if !now.Before(deadline) {
			return nil, fmt.Errorf("no NATS server answered within %v: %w", timeout, err)
		}
		if now.Sub(lastLog) >= 5*time.Second {
			lastLog = now
			log.Info("waiting for the NATS server", "url", Redact(cfg.URL), "waited", now.Sub(start).Round(time.Second))
		}
		t := time.NewTimer(min(250*time.Millisecond, deadline.Sub(now)))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("waiting for the NATS server at %s: %w", Redact(cfg.URL), ctx.Err())
		case <-t.C:
		}
	}
}

// unreachable reports whether a connect error means that no server
// answered (worth retrying) rather than that one refused us.
func unreachable(err error) bool {
	if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) || errors.Is(err, nats.ErrAuthRevoked) {
		return false
	}
	var dns *net.DNSError
	var op *net.OpError
	return errors.Is(err, nats.ErrNoServers) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.ENETUNREACH) || errors.Is(err, os.ErrDeadlineExceeded) ||
		errors.As(err, &dns) || errors.As(err, &op)
}
