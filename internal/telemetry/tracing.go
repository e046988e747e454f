package telemetry

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/tpcoord/tpcoord/internal/buildinfo"
	"github.com/tpcoord/tpcoord/internal/fielderr"
)

// tracing is an OTLP-exporting tracer provider.
type tracing struct {
	Provider *sdktrace.TracerProvider
	Endpoint string // for the log
	Protocol string // grpc or http
}

// Shutdown flushes the spans not yet exported and stops the exporter.
func (t *tracing) Shutdown(ctx context.Context) error {
	if t == nil || t.Provider == nil {
		return nil
	}
	return t.Provider.Shutdown(ctx)
}

// newTracing builds an OTLP-exporting tracer provider from c and the
// standard OTEL_* variables (getenv). The exporter itself reads
// OTEL_EXPORTER_OTLP_* (endpoint, insecure, headers, certificates,
// timeout) when c leaves them unset; the resource reads OTEL_SERVICE_NAME
// and OTEL_RESOURCE_ATTRIBUTES, which override the defaults (service.name
// tpcoord, tpc.job, tpc.rank, host.name). With no endpoint configured, or
// OTEL_TRACES_EXPORTER=none, it returns nil and nothing touches the network.
func newTracing(ctx context.Context, c Config, l Labels, getenv func(string) string, log *slog.Logger) (*tracing, error) {
	envEndpoint := firstEnv(getenv, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
	if c.OTLPEndpoint == "" && (envEndpoint == "" || getenv("OTEL_TRACES_EXPORTER") == "none") {
		return nil, nil
	}
	proto := defaultProtocol(c, getenv)
	t := &tracing{Endpoint: envEndpoint}
	var exp sdktrace.SpanExporter
	var err error
	switch proto {
	case "grpc":
		t.Protocol = "grpc"
		exp, err = grpcExporter(ctx, c, t)
	case "http", "http/protobuf":
		t.Protocol = "http/protobuf"
		exp, err = httpExporter(ctx, c, t)
	default:
		return nil, fielderr.New("OTLPProtocol", "OTEL_EXPORTER_OTLP_PROTOCOL %q is not supported (grpc, http/protobuf)", proto)
	}
	if err != nil {
		return nil, err
	}
	res, err := newResource(ctx, l, getenv)
	if err != nil {
		_ = exp.Shutdown(ctx)
		return nil, err
	}
	exp = &reportingExporter{SpanExporter: exp, log: log, endpoint: t.Endpoint, protocol: t.Protocol}
	// Every traced step is exported (sampling is the driver's TraceEvery);
	// a span with a parent from elsewhere (a request sent with a caller's
	// trace context) follows the caller's sampling decision.
	t.Provider = sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res), sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())))
	return t, nil
}

// defaultProtocol is the OTLP protocol to export with: the flag, else the
// OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL variable, else, as the OpenTelemetry
// specification says, http/protobuf; an endpoint given as a bare host:port
// (the flag's documented gRPC form, e.g. 127.0.0.1:4317) means grpc.
func defaultProtocol(c Config, getenv func(string) string) string {
	if p := strings.ToLower(c.OTLPProtocol); p != "" {
		return p
	}
	if p := firstEnv(getenv, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"); p != "" {
		return strings.ToLower(p)
	}
	if c.OTLPEndpoint != "" && !strings.Contains(c.OTLPEndpoint, "://") {
		return "grpc"
	}
	return "http/protobuf"
}

func firstEnv(getenv func(string) string, names ...string) string {
	for _, n := range names {
		if v := getenv(n); v != "" {
			return v
		}
	}
	return ""
}

// grpcExporter builds the OTLP/gRPC exporter; t.Endpoint is set to what
// c.OTLPEndpoint names, if anything.
func grpcExporter(ctx context.Context, c Config, t *tracing) (sdktrace.SpanExporter, error) {
	var opts []otlptracegrpc.Option
	insecure := c.OTLPInsecure
	if c.OTLPEndpoint != "" {
		host, plain, _, err := splitEndpoint(c.OTLPEndpoint)
		if err != nil {
			return nil, err
		}
		t.Endpoint, insecure = host, insecure || plain
		opts = append(opts, otlptracegrpc.WithEndpoint(host))
	}
	if insecure {
		opts = append(opts, otlptracegrpc.WithInsecure())
	}
	exp, err := otlptracegrpc.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("otlp exporter: %w", err)
	}
	return exp, nil
}

// httpExporter builds the OTLP/HTTP (protobuf) exporter.
func httpExporter(ctx context.Context, c Config, t *tracing) (sdktrace.SpanExporter, error) {
	var opts []otlptracehttp.Option
	insecure := c.OTLPInsecure
	if c.OTLPEndpoint != "" {
		host, plain, path, err := splitEndpoint(c.OTLPEndpoint)
		if err != nil {
			return nil, err
		}
		t.Endpoint, insecure = host+path, insecure || plain
		opts = append(opts, otlptracehttp.WithEndpoint(host))
		if path != "" {
			opts = append(opts, otlptracehttp.WithURLPath(path))
		}
	}
	if insecure {
		opts = append(opts, otlptracehttp.WithInsecure())
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("otlp exporter: %w", err)
	}
	return exp, nil
}

func newResource(ctx context.Context, l Labels, getenv func(string) string) (*resource.Resource, error) {
	host, _ := os.Hostname()
	attrs := []attribute.KeyValue{
		attribute.String("service.name", "tpcoord"),
		attribute.String("service.version", buildinfo.Get().Version),
		attribute.String("service.instance.id", fmt.Sprintf("%s/%d", l.Job, l.Rank)),
		attribute.String("host.name", host),
		attribute.String("tpc.job", l.Job),
		attribute.Int("tpc.rank", l.Rank),
	}
	if l.Gateway {
		attrs = append(attrs[:2], attribute.String("service.instance.id", fmt.Sprintf("%s/gateway/%s/%d", l.Job, host, os.Getpid())),
			attribute.String("host.name", host), attribute.String("tpc.job", l.Job), attribute.String("tpc.role", "gateway"))
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attrs...),
		resource.WithTelemetrySDK(),
		// Last, so the variables override the defaults above.
		resource.WithDetectors(envDetector{getenv}),
	)
	if err != nil {
		return nil, fmt.Errorf("otel resource: %w", err)
	}
	return res, nil
}

// reportingExporter logs the first failed export at once, naming the
// endpoint and protocol: a collector that cannot be reached, or that speaks
// another protocol, shows in the first batch (every few seconds), not at
// exit. Later failures reach OpenTelemetry's error handler.
type reportingExporter struct {
	sdktrace.SpanExporter
	log                *slog.Logger
	endpoint, protocol string
	once               sync.Once
}

// ExportSpans exports spans and reports the first failure.
func (e *reportingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := e.SpanExporter.ExportSpans(ctx, spans)
	if err != nil {
		e.once.Do(func() {
			e.log.Error("trace export failed; spans are being dropped", "endpoint", e.endpoint, "protocol", e.protocol, "err", err)
		})
	}
	return err
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
			return "", false, "", fielderr.New("OTLPEndpoint", "%q is neither host:port nor a URL: %v", ep, err)
		}
		return ep, false, "", nil
	}
	u, err := url.Parse(ep)
	if err != nil || u.Host == "" {
		return "", false, "", fielderr.New("OTLPEndpoint", "%q is not a valid URL", ep)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", false, "", fielderr.New("OTLPEndpoint", "scheme %q is not http or https", u.Scheme)
	}
	if u.Path != "" && u.Path != "/" {
		path = u.Path
	}
	return u.Host, u.Scheme == "http", path, nil
}
