package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/pflag"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/tpcoord/tpcoord/rank"
)

// telemetryOpts are the agent's tracing-export, metrics and flight
// recorder settings.
type telemetryOpts struct {
	OTLPEndpoint string
	OTLPProtocol string
	OTLPInsecure bool
	MetricsAddr  string
	FlightDir    string
	FlightSteps  int
}

func (o *telemetryOpts) flags(fs *pflag.FlagSet) {
	fs.StringVar(&o.OTLPEndpoint, "otlp-endpoint", "", "export trace spans over OTLP to this collector (host:port or URL, e.g. 127.0.0.1:4317 or http://127.0.0.1:4318); empty: OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT if set, else no export")
	fs.StringVar(&o.OTLPProtocol, "otlp-protocol", "", "OTLP protocol: grpc or http (empty: OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL, else grpc)")
	fs.BoolVar(&o.OTLPInsecure, "otlp-insecure", false, "OTLP without TLS (implied by an http:// endpoint URL)")
	fs.StringVar(&o.MetricsAddr, "metrics-addr", "", "serve Prometheus /metrics, /healthz and /readyz on this host:port (empty: off; port 0 picks a free one, logged and shown by status)")
	fs.StringVar(&o.FlightDir, "flight-dir", "", "also write flight recorder dumps (on abort and SIGUSR1) to files in this directory")
	fs.IntVar(&o.FlightSteps, "flight-steps", rank.DefaultFlightSteps, "steps the flight recorder keeps")
}

func (o *telemetryOpts) validate() error {
	switch strings.ToLower(o.OTLPProtocol) {
	case "", "grpc", "http", "http/protobuf":
	default:
		return configError("otlp-protocol: %q is not one of grpc, http", o.OTLPProtocol)
	}
	if o.FlightSteps < 1 || o.FlightSteps > 1<<20 {
		return configError("flight-steps: must be in [1, %d], got %d", 1<<20, o.FlightSteps)
	}
	if o.MetricsAddr != "" {
		if _, _, err := net.SplitHostPort(o.MetricsAddr); err != nil {
			return configError("metrics-addr: %v", err)
		}
	}
	return nil
}

// tracing is what setupTracing built: a provider to install, or nil when
// no exporter is configured.
type tracing struct {
	Provider *sdktrace.TracerProvider
	Endpoint string // for the log
	Protocol string
}

// Shutdown flushes the spans not yet exported and stops the exporter.
func (t *tracing) Shutdown(ctx context.Context) error {
	if t == nil || t.Provider == nil {
		return nil
	}
	return t.Provider.Shutdown(ctx)
}

// setupTracing builds an OTLP-exporting tracer provider from the flags
// and the standard OTEL_* variables (getenv). The exporter itself reads
// OTEL_EXPORTER_OTLP_* (endpoint, insecure, headers, certificates,
// timeout) when the flags leave them unset; the resource reads
// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES, which override the
// defaults (service.name tpcoord, tpc.job, tpc.rank, host.name). With no
// endpoint configured, or OTEL_TRACES_EXPORTER=none, it returns nil and
// nothing touches the network.
func setupTracing(ctx context.Context, o telemetryOpts, job string, rankID int, getenv func(string) string) (*tracing, error) {
	envEndpoint := getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	if envEndpoint == "" {
		envEndpoint = getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
	}
	if o.OTLPEndpoint == "" && (envEndpoint == "" || getenv("OTEL_TRACES_EXPORTER") == "none") {
		return nil, nil
	}
	proto := strings.ToLower(o.OTLPProtocol)
	if proto == "" {
		proto = getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
		if proto == "" {
			proto = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
		}
	}
	switch proto {
	case "", "grpc":
		proto = "grpc"
	case "http", "http/protobuf":
		proto = "http"
	default:
		return nil, configError("OTEL_EXPORTER_OTLP_PROTOCOL: %q is not supported (grpc, http/protobuf)", proto)
	}
	t := &tracing{Protocol: proto, Endpoint: envEndpoint}
	var exp sdktrace.SpanExporter
	var err error
	if proto == "grpc" {
		var opts []otlptracegrpc.Option
		if o.OTLPEndpoint != "" {
			host, insecure, _, err := splitEndpoint(o.OTLPEndpoint)
			if err != nil {
				return nil, err
			}
			t.Endpoint = host
			opts = append(opts, otlptracegrpc.WithEndpoint(host))
			if insecure || o.OTLPInsecure {
				opts = append(opts, otlptracegrpc.WithInsecure())
			}
		} else if o.OTLPInsecure {
			opts = append(opts, otlptracegrpc.WithInsecure())
		}
		exp, err = otlptracegrpc.New(ctx, opts...)
	} else {
		var opts []otlptracehttp.Option
		if o.OTLPEndpoint != "" {
			host, insecure, path, err := splitEndpoint(o.OTLPEndpoint)
			if err != nil {
				return nil, err
			}
			t.Endpoint = host + path
			opts = append(opts, otlptracehttp.WithEndpoint(host))
			if path != "" {
				opts = append(opts, otlptracehttp.WithURLPath(path))
			}
			if insecure || o.OTLPInsecure {
				opts = append(opts, otlptracehttp.WithInsecure())
			}
		} else if o.OTLPInsecure {
			opts = append(opts, otlptracehttp.WithInsecure())
		}
		exp, err = otlptracehttp.New(ctx, opts...)
	}
	if err != nil {
		return nil, fmt.Errorf("otlp exporter: %w", err)
	}
	host, _ := os.Hostname()
	res, err := resource.New(ctx,
		resource.WithAttributes(
			attribute.String("service.name", "tpcoord"),
			attribute.String("service.instance.id", fmt.Sprintf("%s/%d", job, rankID)),
			attribute.String("host.name", host),
			attribute.String("tpc.job", job),
			attribute.Int("tpc.rank", rankID),
		),
		resource.WithTelemetrySDK(),
		// Last, so the variables override the defaults above.
		resource.WithDetectors(envDetector{getenv}),
	)
	if err != nil {
		_ = exp.Shutdown(ctx)
		return nil, fmt.Errorf("otel resource: %w", err)
	}
	// Every traced step is exported (sampling is --trace-every's job).
	t.Provider = sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	return t, nil
}

// envDetector is resource.WithFromEnv reading through getenv, so tests
// need not set the process environment.
type envDetector struct{ getenv func(string) string }

func (e envDetector) Detect(context.Context) (*resource.Resource, error) {
	var attrs []attribute.KeyValue
	for _, kv := range strings.Split(e.getenv("OTEL_RESOURCE_ATTRIBUTES"), ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || strings.TrimSpace(k) == "" {
			continue
		}
		if uv, err := url.PathUnescape(strings.TrimSpace(v)); err == nil {
			v = uv
		}
		attrs = append(attrs, attribute.String(strings.TrimSpace(k), v))
	}
	if name := e.getenv("OTEL_SERVICE_NAME"); name != "" {
		attrs = append(attrs, attribute.String("service.name", name))
	}
	return resource.NewSchemaless(attrs...), nil
}

// splitEndpoint takes host:port or a URL and returns host:port, whether
// the scheme asks for plain text, and the URL path (empty: default).
func splitEndpoint(ep string) (host string, insecure bool, path string, err error) {
	if !strings.Contains(ep, "://") {
		if _, _, err := net.SplitHostPort(ep); err != nil {
			return "", false, "", configError("otlp-endpoint: %q is neither host:port nor a URL: %v", ep, err)
		}
		return ep, false, "", nil
	}
	u, err := url.Parse(ep)
	if err != nil || u.Host == "" {
		return "", false, "", configError("otlp-endpoint: %q is not a valid URL", ep)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", false, "", configError("otlp-endpoint: scheme %q is not http or https", u.Scheme)
	}
	if u.Path != "" && u.Path != "/" {
		path = u.Path
	}
	return u.Host, u.Scheme == "http", path, nil
}

// metricsServer serves /metrics, /healthz and /readyz.
type metricsServer struct {
	srv  *http.Server
	ln   net.Listener
	done chan struct{}
	err  error
}

// newMetricsRegistry is the agent's own registry (no global state): the
// rank's metrics plus the Go runtime and process collectors.
func newMetricsRegistry() (*prometheus.Registry, *rank.Metrics, error) {
	reg := prometheus.NewRegistry()
	if err := reg.Register(collectors.NewGoCollector()); err != nil {
		return nil, nil, err
	}
	if err := reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, nil, err
	}
	m, err := rank.NewMetrics(reg)
	if err != nil {
		return nil, nil, err
	}
	return reg, m, nil
}

// startMetricsServer listens on addr and serves reg; ready answers /readyz.
// Close stops it and waits for its goroutine.
func startMetricsServer(addr string, reg *prometheus.Registry, ready func() bool, log *slog.Logger) (*metricsServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics-addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready() {
			http.Error(w, "not ready: rendezvous incomplete or decode loop not running", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	s := &metricsServer{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}, ln: ln, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.err = err
			log.Error("metrics server stopped", "err", err)
		}
	}()
	return s, nil
}

// Addr is the address the server listens on.
func (s *metricsServer) Addr() string { return s.ln.Addr().String() }

// Close stops the server and waits for it. It is idempotent.
func (s *metricsServer) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	<-s.done
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// flightDumper writes the flight recorder to the log and, with a
// directory, to a file there.
type flightDumper struct {
	fr    *rank.FlightRecorder
	label string
	dir   string
	log   *slog.Logger
	now   func() time.Time

	mu sync.Mutex // one dump at a time, so files get distinct names
}

// dump writes one dump; why says what triggered it.
func (f *flightDumper) dump(why string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	var b bytes.Buffer
	_ = f.fr.Dump(&b, f.label, now)
	attrs := []any{"reason", why, "dump", b.String()}
	if f.dir != "" {
		name := filepath.Join(f.dir, fmt.Sprintf("flight-%s-%s.txt", strings.ReplaceAll(f.label, " ", "-"), now.UTC().Format("20060102T150405.000000000")))
		if err := os.MkdirAll(f.dir, 0o755); err != nil {
			f.log.Error("flight recorder: cannot create directory", "dir", f.dir, "err", err)
		} else if err := os.WriteFile(name, b.Bytes(), 0o644); err != nil {
			f.log.Error("flight recorder: cannot write dump", "file", name, "err", err)
		} else {
			attrs = append(attrs, "file", name)
		}
	}
	f.log.Warn("flight recorder dump", attrs...)
}

// watch dumps on every value from sigs (SIGUSR1 in the agent) until stop
// is called; stop waits for the goroutine.
func (f *flightDumper) watch(sigs <-chan os.Signal) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			case s := <-sigs:
				f.dump("signal " + s.String())
			}
		}
	})
	var once sync.Once
	return func() {
		once.Do(func() { close(done) })
		wg.Wait()
	}
}

// agentTelemetry is an agent's tracing export, metrics server and flight
// recorder, set up before the rendezvous (so /healthz answers while it
// waits) and torn down by Close.
type agentTelemetry struct {
	tracing *tracing
	metrics *rank.Metrics
	server  *metricsServer
	flight  *rank.FlightRecorder
	dumper  *flightDumper
	sigs    chan os.Signal
	stopSig func()
	log     *slog.Logger
}

// startTelemetry sets up what cfg asks for. With an OTLP endpoint it
// installs the exporting provider as the global tracer provider, so the
// driver's otel.Tracer spans are exported.
func startTelemetry(ctx context.Context, cfg agentConfig, log *slog.Logger) (_ *agentTelemetry, err error) {
	t := &agentTelemetry{log: log, flight: rank.NewFlightRecorder(cfg.FlightSteps)}
	defer func() {
		if err != nil {
			t.Close()
		}
	}()
	if t.tracing, err = setupTracing(ctx, cfg.telemetryOpts, cfg.Job, cfg.Rank, os.Getenv); err != nil {
		return nil, err
	}
	if t.tracing != nil {
		otel.SetTracerProvider(t.tracing.Provider)
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("opentelemetry", "err", err) }))
		log.Info("exporting trace spans over OTLP", "endpoint", t.tracing.Endpoint, "protocol", t.tracing.Protocol, "trace_every", cfg.TraceEvery)
	}
	if cfg.MetricsAddr != "" {
		reg, m, err := newMetricsRegistry()
		if err != nil {
			return nil, err
		}
		t.metrics = m
		if t.server, err = startMetricsServer(cfg.MetricsAddr, reg, m.Ready, log); err != nil {
			return nil, err
		}
		m.Addr = t.server.Addr()
		log.Info("serving metrics", "addr", "http://"+m.Addr+"/metrics")
	}
	t.dumper = &flightDumper{fr: t.flight, label: fmt.Sprintf("job %s rank %d", cfg.Job, cfg.Rank), dir: cfg.FlightDir, log: log, now: time.Now}
	t.sigs = make(chan os.Signal, 1)
	signal.Notify(t.sigs, syscall.SIGUSR1)
	t.stopSig = t.dumper.watch(t.sigs)
	return t, nil
}

// runEnded dumps the flight recorder when an epoch's loop ended in error
// (an abort or a lost peer).
func (t *agentTelemetry) runEnded(err error) {
	if err != nil {
		t.dumper.dump(err.Error())
	}
}

// Close stops the signal watcher and the metrics server and flushes the
// spans not yet exported. It waits for every goroutine it started.
func (t *agentTelemetry) Close() {
	if t.sigs != nil {
		signal.Stop(t.sigs)
		t.stopSig()
		t.sigs = nil
	}
	if t.server != nil {
		if err := t.server.Close(); err != nil {
			t.log.Debug("metrics server close", "err", err)
		}
		t.server = nil
	}
	if t.tracing != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := t.tracing.Shutdown(ctx); err != nil {
			t.log.Warn("flushing trace spans", "err", err)
		}
		cancel()
		t.tracing = nil
	}
}
