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
// context ends. Then it ends those still open: each of their NATS requests
// is cancelled at rank 0, and a stream gets an error event (code
// "shutting_down") and [DONE], a request not yet answered a 503.
const ShutdownGrace = 10 * time.Second

// EndGrace is how long the requests ended at the shutdown get to write
// their last words (a cancel waits up to 3 s for rank 0's answer) before
// Serve closes their connections.
const EndGrace = 5 * time.Second

// errShuttingDown is the cause the requests still open at the end of the
// shutdown grace are cancelled with.
var errShuttingDown = errors.New("the server is shutting down: the request was cancelled before it finished")

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
// get ShutdownGrace to finish, then are ended with an error (see
// ShutdownGrace), so that no stream is cut without one. It returns once
// every handler has returned.
func (g *Gateway) Serve(ctx context.Context, ln net.Listener) error {
	// The handlers' context outlives ctx: requests in flight go on until
	// the grace is over, when shutdown ends them (errShuttingDown).
	base, endRequests := context.WithCancelCause(context.WithoutCancel(ctx))
	defer endRequests(nil)
	srv := &http.Server{
		Handler:           g.Handler(),
		ReadHeaderTimeout: min(HeaderTimeout, g.cfg.BodyTimeout),
		// The whole request, from its first byte: a body that stalls gets
		// an error at its next read (408). Once the body is read net/http
		// lifts the deadline, so a long answer is not cut.
		ReadTimeout: g.cfg.BodyTimeout,
		IdleTimeout: 2 * time.Minute,
		BaseContext: func(net.Listener) context.Context { return base },
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
	g.shutdown(srv, endRequests)
	err := <-errc
	g.handlers.Wait() // their clients are cancelled: each ends within seconds
	g.closeReplies()
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("gateway: %w", err)
	}
	return nil
}

// shutdown stops srv taking requests and waits the grace for those in
// flight; then it ends those still open with errShuttingDown, and gives
// them EndGrace to say so to their clients before it closes their
// connections.
func (g *Gateway) shutdown(srv *http.Server, endRequests context.CancelCauseFunc) {
	sctx, cancel := context.WithTimeout(context.Background(), g.grace)
	defer cancel()
	if srv.Shutdown(sctx) == nil {
		return
	}
	g.log.Warn("requests still open after the shutdown grace: ending them with an error", "grace", g.grace)
	endRequests(errShuttingDown)
	ectx, cancelEnd := context.WithTimeout(context.Background(), EndGrace)
	defer cancelEnd()
	if srv.Shutdown(ectx) != nil {
		_ = srv.Close() // still open: cut them
	}
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
