package telemetry

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tpcoord/tpcoord/internal/buildinfo"
)

func TestSetupTracingOffWithoutEndpoint(t *testing.T) {
	env := map[string]string{"OTEL_SERVICE_NAME": "x"}
	tr, err := newTracing(context.Background(), Config{}, Labels{Job: "j"}, func(k string) string { return env[k] }, slog.New(slog.DiscardHandler))
	if err != nil || tr != nil {
		t.Fatalf("newTracing without endpoint = %v, %v; want nil, nil", tr, err)
	}
	env["OTEL_EXPORTER_OTLP_ENDPOINT"], env["OTEL_TRACES_EXPORTER"] = "http://127.0.0.1:1", "none"
	if tr, err := newTracing(context.Background(), Config{}, Labels{Job: "j"}, func(k string) string { return env[k] }, slog.New(slog.DiscardHandler)); err != nil || tr != nil {
		t.Fatalf("newTracing with OTEL_TRACES_EXPORTER=none = %v, %v; want nil, nil", tr, err)
	}
}

func TestSplitEndpoint(t *testing.T) {
	for _, c := range []struct {
		in, host, path string
		insecure, err  bool
	}{
		{in: "127.0.0.1:4317", host: "127.0.0.1:4317"},
		{in: "http://collector:4318", host: "collector:4318", insecure: true},
		{in: "https://collector:4318/custom/traces", host: "collector:4318", path: "/custom/traces"},
		{in: "collector", err: true},
		{in: "ftp://collector:1", err: true},
	} {
		host, insecure, path, err := splitEndpoint(c.in)
		if (err != nil) != c.err || host != c.host || insecure != c.insecure || path != c.path {
			t.Errorf("splitEndpoint(%q) = %q, %v, %q, %v", c.in, host, insecure, path, err)
		}
	}
}

// received collects OTLP export requests.
type received struct {
	mu   sync.Mutex
	reqs []*coltracepb.ExportTraceServiceRequest
}

func (r *received) add(req *coltracepb.ExportTraceServiceRequest) {
	r.mu.Lock()
	r.reqs = append(r.reqs, req)
	r.mu.Unlock()
}

// spans returns span name → its resource attributes.
func (r *received) spans() map[string]map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]map[string]string{}
	for _, req := range r.reqs {
		for _, rs := range req.ResourceSpans {
			attrs := map[string]string{}
			for _, kv := range rs.Resource.GetAttributes() {
				attrs[kv.Key] = anyString(kv.Value)
			}
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					out[s.Name] = attrs
				}
			}
		}
	}
	return out
}

func anyString(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	}
	return v.String()
}

// exportOne creates a span through tr's provider and shuts it down,
// which flushes the span to the receiver.
func exportOne(t *testing.T, tr *tracing, name string) {
	t.Helper()
	if tr == nil {
		t.Fatal("newTracing returned no provider")
	}
	_, span := tr.Provider.Tracer("test").Start(context.Background(), name)
	span.End()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tr.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
}

// TestSetupTracingHTTPFromEnv: the endpoint comes from
// OTEL_EXPORTER_OTLP_ENDPOINT (read by the SDK's exporter itself), the
// protocol from the flag; the resource carries the defaults overridden
// by OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES.
func TestSetupTracingHTTPFromEnv(t *testing.T) {
	var got received
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "unexpected "+r.URL.Path, http.StatusNotFound)
			return
		}
		body, _ := io.ReadAll(r.Body)
		var req coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		got.add(&req)
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		_, _ = w.Write(out)
	}))
	defer srv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_SERVICE_NAME", "tpc-test")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=ci,tpc.job=overridden")
	tr, err := newTracing(context.Background(), Config{OTLPProtocol: "http"}, Labels{Job: "j1", Rank: 2}, os.Getenv, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	exportOne(t, tr, "probe")
	res, ok := got.spans()["probe"]
	if !ok {
		t.Fatalf("receiver got no span named probe: %v", got.spans())
	}
	host, _ := os.Hostname()
	for k, want := range map[string]string{"service.name": "tpc-test", "tpc.rank": "2", "tpc.job": "overridden", "deployment.environment": "ci", "host.name": host} {
		if res[k] != want {
			t.Errorf("resource %s = %q, want %q (all: %v)", k, res[k], want, res)
		}
	}
}

type traceService struct {
	coltracepb.UnimplementedTraceServiceServer
	got *received
}

func (s traceService) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	s.got.add(req)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// TestSetupTracingGRPCFlags: --otlp-endpoint host:port with
// --otlp-insecure exports over gRPC; the service name defaults to tpcoord.
func TestSetupTracingGRPCFlags(t *testing.T) {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		t.Setenv(k, "")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var got received
	gs := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(gs, traceService{got: &got})
	served := make(chan error, 1)
	go func() { served <- gs.Serve(ln) }()
	defer func() { gs.Stop(); <-served }()

	tr, err := newTracing(context.Background(), Config{OTLPEndpoint: ln.Addr().String(), OTLPInsecure: true}, Labels{Job: "j2", Rank: 1}, os.Getenv, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if tr.Protocol != "grpc" {
		t.Errorf("protocol %q, want grpc by default", tr.Protocol)
	}
	exportOne(t, tr, "probe")
	res, ok := got.spans()["probe"]
	if !ok {
		t.Fatalf("receiver got no span named probe")
	}
	if res["service.name"] != "tpcoord" || res["service.version"] != buildinfo.Dev || res["tpc.job"] != "j2" || res["tpc.rank"] != "1" {
		t.Errorf("resource %v, want service.name tpcoord, service.version dev, tpc.job j2, tpc.rank 1", res)
	}
}

// TestMetricsServer: the rank's collectors and readiness (a stand-in here;
// package rank's own are tested there) are served beside the build's info
// and the runtime's.
func TestMetricsServer(t *testing.T) {
	var ready atomic.Bool
	reg, readyFn, err := newMetricsRegistry(func(r prometheus.Registerer) (func() bool, error) {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "tpcoord_test_gauge", Help: "a rank's collector"})
		g.Set(7)
		return ready.Load, r.Register(g)
	})
	if err != nil {
		t.Fatal(err)
	}
	s, err := startMetricsServer("127.0.0.1:0", reg, readyFn, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + s.Addr() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	// /health and /ready, the gateway's spellings, are aliases.
	for _, p := range []string{"/healthz", "/health"} {
		if code, _ := get(p); code != 200 {
			t.Errorf("%s: %d, want 200", p, code)
		}
	}
	for _, p := range []string{"/readyz", "/ready"} {
		if code, _ := get(p); code != http.StatusServiceUnavailable {
			t.Errorf("%s while the rank says not ready: %d, want 503", p, code)
		}
	}
	ready.Store(true)
	for _, p := range []string{"/readyz", "/ready"} {
		if code, _ := get(p); code != 200 {
			t.Errorf("%s once the rank says ready: %d, want 200", p, code)
		}
	}
	code, body := get("/metrics")
	if code != 200 || !strings.Contains(body, "tpcoord_test_gauge 7") || !strings.Contains(body, "go_goroutines") ||
		!strings.Contains(body, fmt.Sprintf(`tpcoord_build_info{commit=%q,go_version=%q,modified="false",version=%q} 1`, "", runtime.Version(), buildinfo.Dev)) {
		t.Errorf("/metrics: %d\n%s", code, body)
	}
	if err := s.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	http.DefaultClient.CloseIdleConnections()
}

// TestFlightDump: a dump goes to the log and to a file in the flight
// directory.
func TestFlightDump(t *testing.T) {
	dir := t.TempDir()
	var logBuf strings.Builder
	log := slog.New(slog.NewTextHandler(&logBuf, nil))
	rec := flightFunc(func(w io.Writer, label string, _ time.Time) error {
		_, err := fmt.Fprintf(w, "flight recorder %s: phase idle\n", label)
		return err
	})
	tel, err := Start(context.Background(), Config{FlightDir: dir, FlightSteps: 4}, Labels{Job: "j", Rank: 3}, Rank{Flight: rec}, func(string) string { return "" }, log)
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Close()
	tel.DumpFlight("signal user defined signal 1")
	files, _ := filepath.Glob(filepath.Join(dir, "flight-job-j-rank-3-*.txt"))
	if len(files) != 1 {
		t.Fatalf("dump files %v, want one", files)
	}
	data, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(data), "flight recorder job j rank 3: phase idle") {
		t.Errorf("dump file:\n%s", data)
	}
	if !strings.Contains(logBuf.String(), "flight recorder dump") || !strings.Contains(logBuf.String(), "reason=\"signal user defined signal 1\"") {
		t.Errorf("log:\n%s", logBuf.String())
	}
}

// flightFunc is a FlightRecorder that writes what its function writes.
type flightFunc func(w io.Writer, label string, now time.Time) error

func (f flightFunc) Dump(w io.Writer, label string, now time.Time) error { return f(w, label, now) }

// TestDefaultProtocol: with no protocol given, the OpenTelemetry default
// (http/protobuf) applies; only the flag's bare host:port form means gRPC.
func TestDefaultProtocol(t *testing.T) {
	for _, tc := range []struct {
		c    Config
		env  map[string]string
		want string
	}{
		{Config{}, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, "http/protobuf"},
		{Config{}, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "grpc"},
		{Config{}, map[string]string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "GRPC"}, "grpc"},
		{Config{OTLPEndpoint: "127.0.0.1:4317"}, nil, "grpc"},
		{Config{OTLPEndpoint: "http://127.0.0.1:4318"}, nil, "http/protobuf"},
		{Config{OTLPEndpoint: "127.0.0.1:4318", OTLPProtocol: "http"}, nil, "http"},
	} {
		if got := defaultProtocol(tc.c, func(k string) string { return tc.env[k] }); got != tc.want {
			t.Errorf("%+v %v: protocol %q, want %q", tc.c, tc.env, got, tc.want)
		}
	}
}

// TestFirstExportFailureReported: an export that fails is logged at once,
// naming the endpoint, once.
func TestFirstExportFailureReported(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	var logBuf strings.Builder
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logBuf.Write(p)
	}), nil))
	tr, err := newTracing(context.Background(), Config{OTLPEndpoint: "http://" + addr}, Labels{Job: "j"}, func(string) string { return "" }, log)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		_, span := tr.Provider.Tracer("t").Start(context.Background(), "lost")
		span.End()
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		_ = tr.Provider.ForceFlush(ctx)
		cancel()
	}
	_ = tr.Shutdown(context.Background())
	mu.Lock()
	defer mu.Unlock()
	if n := strings.Count(logBuf.String(), "trace export failed"); n != 1 || !strings.Contains(logBuf.String(), addr) {
		t.Fatalf("log has %d export failures, want one naming %s:\n%s", n, addr, logBuf.String())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
