package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/internal/fielderr"
	"github.com/tpcoord/tpcoord/rank/client"
)

// Config is a gateway's configuration; DefaultConfig holds the defaults.
type Config struct {
	// Listen is the HTTP address (host:port; ListenAddr binds a bare
	// port to loopback). An IP beyond loopback needs APIKeys and TLS, or
	// Insecure; a host name is refused there (it may resolve to every
	// interface).
	Listen string
	// Insecure serves Listen beyond loopback without APIKeys and TLS.
	Insecure bool
	// Model is the name /v1/models lists and requests must give.
	Model string
	// APIKeys, if any, are the Bearer tokens /v1/* accepts.
	APIKeys []string
	// TLSCert and TLSKey, both or neither, serve HTTPS.
	TLSCert, TLSKey string
	// MaxBodyBytes bounds a request body: a Content-Length above it is
	// answered 413 before any of the body is read.
	MaxBodyBytes int64
	// BodyTimeout bounds receiving a request, headers and body, from its
	// first byte (the headers alone get at most HeaderTimeout). A body
	// that stalls, never ends or falls short of its Content-Length is
	// answered 408 and its connection closed; the same bound frees the
	// connection of a request refused before its body was read (401,
	// 413). Default 30 s.
	BodyTimeout time.Duration
	// RequestTimeout bounds one HTTP request from arrival to last token.
	RequestTimeout time.Duration
	// ResumeWindow is how long a request whose rank 0 is gone, restarted,
	// re-forming or unreachable is resubmitted, continuing from the
	// tokens it has, before it fails (client.WithResumeWindow; 0: never).
	// Default client.DefaultResumeWindow.
	ResumeWindow time.Duration
	// DefaultMaxTokens is max_tokens when a request leaves it out
	// (OpenAI's completions default, 16; chat uses ChatMaxTokens).
	DefaultMaxTokens, ChatMaxTokens int
	// CORSOrigins lists the origins browsers may call from ("*": any);
	// empty: no CORS headers (browsers refuse cross-origin calls).
	CORSOrigins []string
	// StatusWait bounds the wait for rank 0's status (/ready, gauges).
	StatusWait time.Duration
	// MaxModelLen is the job's bound on a request's tokens, prompt and
	// output (the agents' --max-model-len), which /tokenize reports as
	// max_model_len; 0: not known, or no bound.
	MaxModelLen int
}

// DefaultConfig is the one place the gateway's defaults live.
func DefaultConfig() Config {
	return Config{
		Listen: "127.0.0.1:8000", MaxBodyBytes: 4 << 20, BodyTimeout: 30 * time.Second, RequestTimeout: 10 * time.Minute,
		ResumeWindow:     client.DefaultResumeWindow,
		DefaultMaxTokens: 16, ChatMaxTokens: 512, StatusWait: 2 * time.Second,
	}
}

// Validate reports the first invalid field.
func (c *Config) Validate() error {
	if c.Listen == "" {
		return fielderr.New("Listen", "must be given (host:port)")
	}
	if err := c.exposure(); err != nil {
		return err
	}
	switch {
	case c.Model == "":
		return fielderr.New("Model", "must be given")
	case (c.TLSCert == "") != (c.TLSKey == ""):
		return fielderr.New("TLSCert", "TLS needs both a certificate and a key")
	case c.MaxBodyBytes < 1024:
		return fielderr.New("MaxBodyBytes", "must be >= 1024, got %d", c.MaxBodyBytes)
	case c.BodyTimeout <= 0:
		return fielderr.New("BodyTimeout", "must be > 0, got %v", c.BodyTimeout)
	case c.RequestTimeout <= 0:
		return fielderr.New("RequestTimeout", "must be > 0, got %v", c.RequestTimeout)
	case c.ResumeWindow < 0:
		return fielderr.New("ResumeWindow", "must be >= 0 (0: never resubmit), got %v", c.ResumeWindow)
	case c.DefaultMaxTokens < 1 || c.ChatMaxTokens < 1:
		return fielderr.New("DefaultMaxTokens", "default max_tokens must be > 0")
	case c.StatusWait <= 0:
		return fielderr.New("StatusWait", "must be > 0, got %v", c.StatusWait)
	case c.MaxModelLen < 0:
		return fielderr.New("MaxModelLen", "must be >= 0 (0: not known), got %d", c.MaxModelLen)
	}
	for i, k := range c.APIKeys {
		if k == "" {
			return fielderr.New("APIKeys", "key %d is empty", i)
		}
	}
	return nil
}

// Gateway serves the OpenAI-compatible API for one job.
type Gateway struct {
	cfg     Config
	bus     broadcast.Transport
	subj    broadcast.Subjects
	tok     Tokenizer // nil: token IDs only
	log     *slog.Logger
	tracer  trace.Tracer
	version string
	metrics *metrics
	vocab   jobVocab   // the job's vocabulary, once a status told it
	keys    [][32]byte // SHA-256 of each API key
	created int64
	checks  grammarChecks // structured outputs that compiled
	// handlers counts the /v1 requests being answered: Serve waits for
	// them, since closing a connection does not wait for its handler.
	handlers sync.WaitGroup
	grace    time.Duration // ShutdownGrace (shorter in tests)
	stall    time.Duration // StreamStallTimeout (shorter in tests)

	muxMu sync.Mutex
	mux   *client.Mux // every request's replies, on one subscription; made at first use
}

// replies returns the reply mux, subscribing it at the first request.
func (g *Gateway) replies(ctx context.Context) (*client.Mux, error) {
	g.muxMu.Lock()
	defer g.muxMu.Unlock()
	if g.mux == nil {
		m, err := client.NewMux(ctx, g.bus)
		if err != nil {
			return nil, err
		}
		g.mux = m
	}
	return g.mux, nil
}

// closeReplies unsubscribes the reply mux, once no request uses it.
func (g *Gateway) closeReplies() {
	g.muxMu.Lock()
	defer g.muxMu.Unlock()
	if g.mux != nil {
		_ = g.mux.Close()
		g.mux = nil
	}
}

// Option sets an optional part of a Gateway.
type Option func(*Gateway)

// WithTokenizer gives the gateway text: text prompts, text answers, stop
// strings and, when the tokenizer has a chat template, chat completions.
func WithTokenizer(t Tokenizer) Option { return func(g *Gateway) { g.tok = t } }

// WithLogger sets the logger (default: none).
func WithLogger(l *slog.Logger) Option { return func(g *Gateway) { g.log = l } }

// WithTracer sets where request spans go (default: nowhere).
func WithTracer(t trace.Tracer) Option { return func(g *Gateway) { g.tracer = t } }

// WithVersion sets the version build_info reports.
func WithVersion(v string) Option { return func(g *Gateway) { g.version = v } }

// New returns a gateway for the job behind bus and subj. It does no I/O.
func New(cfg Config, bus broadcast.Transport, subj broadcast.Subjects, opts ...Option) (*Gateway, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	g := &Gateway{cfg: cfg, bus: bus, subj: subj, log: slog.New(slog.DiscardHandler), tracer: noop.NewTracerProvider().Tracer(""), created: time.Now().Unix(),
		grace: ShutdownGrace, stall: StreamStallTimeout}
	for _, o := range opts {
		o(g)
	}
	for _, k := range cfg.APIKeys {
		g.keys = append(g.keys, keyHash(k))
	}
	g.metrics = newMetrics(g)
	return g, nil
}

// Handler is the gateway's HTTP API.
func (g *Gateway) Handler() http.Handler {
	mux := http.NewServeMux()
	live := func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }
	mux.HandleFunc("GET /health", live)
	mux.HandleFunc("GET /healthz", live) // the agents' spelling
	mux.HandleFunc("GET /ready", g.handleReady)
	mux.HandleFunc("GET /readyz", g.handleReady)
	mux.HandleFunc("GET /version", g.handleVersion)
	mux.Handle("GET /metrics", g.metrics.handler())
	mux.Handle("GET /v1/models", g.api("models", g.handleModels))
	mux.Handle("POST /v1/completions", g.api("text_completion", g.handleCompletions))
	mux.Handle("POST /v1/chat/completions", g.api("chat", g.handleChat))
	mux.Handle("POST /tokenize", g.api("tokenize", g.handleTokenize))
	mux.Handle("POST /detokenize", g.api("detokenize", g.handleDetokenize))
	return g.cors(unmatchedAsJSON(mux))
}

// api wraps an endpoint of /v1: the body limit, the API key, the request
// span and the HTTP metrics.
func (g *Gateway) api(op string, h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.handlers.Add(1)
		defer g.handlers.Done()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		ctx, span := g.startSpan(r, op)
		r = r.WithContext(ctx)
		defer func() {
			g.endSpan(span, r, sw.status)
			g.metrics.httpRequests.WithLabelValues(r.Pattern, statusClass(sw.status)).Inc()
		}()
		if !g.authorized(r) {
			refuseUnread(sw, r, &apiError{Status: http.StatusUnauthorized, Message: "a valid API key is required (Authorization: Bearer <key>)",
				Type: "authentication_error", Code: "invalid_api_key"})
			return
		}
		if r.ContentLength > g.cfg.MaxBodyBytes {
			refuseUnread(sw, r, tooLarge(g.cfg.MaxBodyBytes))
			return
		}
		r.Body = http.MaxBytesReader(sw, r.Body, g.cfg.MaxBodyBytes)
		h(sw, r)
	})
}

// refuse answers a request that was refused before it reached the job.
func (g *Gateway) refuse(w http.ResponseWriter, r *http.Request, e *apiError) {
	g.log.Debug("request refused", "path", r.URL.Path, "status", e.Status, "param", e.Param, "err", e.Message)
	recordError(r.Context(), e)
	writeError(w, e)
}

// handle answers one API request: its body decoded strictly into a Req,
// checked into a plan, run and answered in the format made for it.
func handle[Req any](g *Gateway, w http.ResponseWriter, r *http.Request, check func(*Req) (*plan, *apiError), f func(*plan) format) {
	var req Req
	ignored, e := decodeStrict(r.Body, &req)
	if e != nil {
		if e.Status == http.StatusRequestTimeout {
			e.Message += fmt.Sprintf(" (--body-timeout %v)", g.cfg.BodyTimeout)
			w.Header().Set("Connection", "close")
		}
		g.refuse(w, r, e)
		return
	}
	g.noteIgnored(w, r, ignored)
	if e := g.vocabRefusal(r.Context()); e != nil {
		g.refuse(w, r, e)
		return
	}
	pl, e := check(&req)
	if e != nil {
		g.refuse(w, r, e)
		return
	}
	g.answer(w, r, pl, f(pl))
}

// noteIgnored names, in the answer's Warning header and in the log, the
// fields of the request that were ignored.
func (g *Gateway) noteIgnored(w http.ResponseWriter, r *http.Request, ignored []string) {
	if len(ignored) == 0 {
		return
	}
	w.Header().Add("Warning", warnIgnored(ignored))
	g.log.Warn("request fields ignored", "path", r.URL.Path, "fields", strings.Join(ignored, ","))
}

// SeedHeader is the answer's header that reports its seed: the request's,
// or the one drawn for a request without one. The same request with that
// seed draws the same tokens, so any answer can be reproduced (or checked)
// later.
const SeedHeader = "Tpcoord-Seed"

// answer runs a checked plan and answers: all at once, or as a stream.
func (g *Gateway) answer(w http.ResponseWriter, r *http.Request, pl *plan, f format) {
	// Before anything is written: a stream's headers go out with its
	// first token.
	w.Header().Set(SeedHeader, strconv.FormatUint(pl.seed, 10))
	ctx, cancel := context.WithTimeout(r.Context(), g.cfg.RequestTimeout)
	defer cancel()
	ctx = client.WithResumeWindow(ctx, g.cfg.ResumeWindow)
	ctx = client.WithResumeNotice(ctx, func(err error, tokens int) {
		g.metrics.resumed.Inc()
		g.log.Info("resubmitting a request after a fault", "tokens", tokens, "err", err)
	})
	describeRequest(ctx, pl)
	x := &execution{g: g, pl: pl, fmt: f}
	if pl.stream {
		// A client that takes nothing for the stall bound is gone: its
		// requests are cancelled at rank 0.
		x.sse = newSSE(w, g.stall, func() { x.cancelAll() })
	}
	choices := x.run(ctx)
	u := usageOf(choices, pl.prompts)
	g.metrics.prompt.Add(float64(u.PromptTokens))
	describeResponse(ctx, choices, u)
	if x.failure != nil {
		g.refuse(w, r, x.failure)
		return
	}
	if !pl.stream {
		for _, c := range choices {
			if c.failed() {
				g.refuse(w, r, pl.requestParam(replyError(c.rep, c.err, ctx.Err() == context.DeadlineExceeded)))
				return
			}
		}
		writeJSON(w, http.StatusOK, f.response(choices, u))
		return
	}
	if pl.includeUsage {
		x.sse.send(f.usageChunk(u))
	}
	x.sse.done()
}

func (g *Gateway) handleModels(w http.ResponseWriter, _ *http.Request) {
	type model struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
	}
	writeJSON(w, http.StatusOK, struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}{"list", []model{{ID: g.cfg.Model, Object: "model", Created: g.created, OwnedBy: "tpcoord"}}})
}

// newID is a random identifier for a response.
func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// statusWriter remembers the status an answer was sent with.
type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (s *statusWriter) WriteHeader(code int) {
	if !s.wrote {
		s.status, s.wrote = code, true
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	s.wrote = true
	return s.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection (Flush).
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func statusClass(code int) string {
	return string(rune('0'+code/100)) + "xx"
}
