package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// HeaderTimeout bounds receiving a request's headers (Config.BodyTimeout,
// if shorter, bounds them too).
const HeaderTimeout = 10 * time.Second

// ShutdownGrace is how long Serve lets requests in flight finish once its
// context ends, before it closes their connections.
const ShutdownGrace = 10 * time.Second

// Listen opens cfg's listener (a port of 0 picks a free one).
func Listen(cfg Config) (net.Listener, error) {
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("gateway: listen on %s: %w", cfg.Listen, err)
	}
	return ln, nil
}

// URL is the base URL of cfg's API on ln.
func URL(cfg Config, ln net.Listener) string {
	scheme := "http"
	if cfg.TLSCert != "" {
		scheme = "https"
	}
	return scheme + "://" + ln.Addr().String() + "/v1"
}

// Serve answers on ln until ctx ends, then shuts down: requests in flight
// get ShutdownGrace to finish (their clients are cancelled after that).
// It returns once every handler has returned.
func (g *Gateway) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           g.Handler(),
		ReadHeaderTimeout: min(HeaderTimeout, g.cfg.BodyTimeout),
		// The whole request, from its first byte: a body that stalls gets
		// an error at its next read (408). Once the body is read net/http
		// lifts the deadline, so a long answer is not cut.
		ReadTimeout: g.cfg.BodyTimeout,
		IdleTimeout: 2 * time.Minute,
		BaseContext: func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
		// The server's own complaints (a client's failed TLS handshake)
		// are about one connection: debug, not the operator's business.
		ErrorLog: slog.NewLogLogger(g.log.Handler(), slog.LevelDebug),
	}
	errc := make(chan error, 1)
	go func() {
		if g.cfg.TLSCert != "" {
			errc <- srv.ServeTLS(ln, g.cfg.TLSCert, g.cfg.TLSKey)
		} else {
			errc <- srv.Serve(ln)
		}
	}()
	g.log.Info("serving the OpenAI-compatible API", "url", URL(g.cfg, ln), "model", g.cfg.Model, "tokenizer", g.tokenizerName(), "auth", len(g.keys) > 0)
	select {
	case err := <-errc:
		return fmt.Errorf("gateway: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), ShutdownGrace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close() // streams still open after the grace: cut them
	}
	err := <-errc
	g.handlers.Wait() // their clients are cancelled: each ends within seconds
	g.closeReplies()
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("gateway: %w", err)
	}
	return nil
}

// ServeWhile serves on ln while use runs (as Serve does, until ctx ends,
// if use is nil), then shuts down as Serve does once its context ends. It
// returns use's error joined with Serve's.
func (g *Gateway) ServeWhile(ctx context.Context, ln net.Listener, use func(context.Context) error) error {
	if use == nil {
		return g.Serve(ctx, ln)
	}
	sctx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- g.Serve(sctx, ln) }() // owned: stopped and waited for below
	err := use(ctx)
	stop()
	return errors.Join(err, <-served)
}

func (g *Gateway) tokenizerName() string {
	if g.tok == nil {
		return "none (token IDs only)"
	}
	return g.tok.Name()
}
