package telemetry

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/prometheus/client_golang/prometheus"
)

// Labels say whose telemetry this is.
type Labels struct {
	Job  string
	Rank int
	// Gateway marks an HTTP gateway's telemetry, which has no rank.
	Gateway bool
}

// Rank is what a rank adds to its telemetry: its collectors and its
// readiness on the metrics server, and the recorder DumpFlight writes out.
// The zero value, a gateway's, adds nothing. Package rank provides both;
// this package does not import it, so a gateway does not link the decode
// loop.
type Rank struct {
	// Metrics registers the rank's collectors on the agent's registry and
	// returns what /readyz answers. It is called only when a metrics
	// server is configured; nil: /readyz answers ready once serving.
	Metrics func(prometheus.Registerer) (ready func() bool, err error)
	// Flight is what DumpFlight writes out; nil: nothing to dump.
	Flight FlightRecorder
}

// FlightRecorder keeps a rank's last steps and writes them out.
type FlightRecorder interface {
	Dump(w io.Writer, label string, now time.Time) error
}

// Telemetry is one agent's tracing export, metrics server and flight
// recorder dumps. Start sets it up; Close tears it down.
type Telemetry struct {
	tracing *tracing
	server  *metricsServer
	dumper  *flightDumper
	log     *slog.Logger

	closeOnce sync.Once
}

// Start sets up what c asks for; getenv reads the OTEL_* variables
// (os.Getenv in the agent). It is meant to run before the rendezvous, so
// /healthz answers while the agent waits for its peers.
func Start(ctx context.Context, c Config, l Labels, r Rank, getenv func(string) string, log *slog.Logger) (_ *Telemetry, err error) {
	t := &Telemetry{log: log}
	defer func() {
		if err != nil {
			t.Close()
		}
	}()
	if t.tracing, err = newTracing(ctx, c, l, getenv, log); err != nil {
		return nil, err
	}
	if t.tracing != nil {
		log.Info("exporting trace spans over OTLP", "endpoint", t.tracing.Endpoint, "protocol", t.tracing.Protocol)
	}
	if c.MetricsAddr != "" {
		reg, ready, err := newMetricsRegistry(r.Metrics)
		if err != nil {
			return nil, err
		}
		if t.server, err = startMetricsServer(c.MetricsAddr, reg, ready, log); err != nil {
			return nil, err
		}
		log.Info("serving metrics", "addr", "http://"+t.server.Addr()+"/metrics")
	}
	t.dumper = &flightDumper{fr: r.Flight, label: fmt.Sprintf("job %s rank %d", l.Job, l.Rank), dir: c.FlightDir, log: log, now: time.Now}
	return t, nil
}

// MetricsAddr is where the metrics server listens (empty: none).
func (t *Telemetry) MetricsAddr() string {
	if t.server == nil {
		return ""
	}
	return t.server.Addr()
}

// Tracer is the tracer the decode loop's spans go to: the OTLP exporter's,
// or one that records nothing.
func (t *Telemetry) Tracer() trace.Tracer {
	if t.tracing == nil {
		return noop.NewTracerProvider().Tracer("")
	}
	return t.tracing.Provider.Tracer("github.com/tpcoord/tpcoord")
}

// DumpFlight writes the flight recorder's steps to the log (and a file in
// the flight directory, if one is set); reason says why.
func (t *Telemetry) DumpFlight(reason string) { t.dumper.dump(reason) }

// ErrorHandler logs OpenTelemetry's own errors (failed exports) to log;
// install it with otel.SetErrorHandler, which is process-wide.
func ErrorHandler(log *slog.Logger) otel.ErrorHandler {
	return otel.ErrorHandlerFunc(func(err error) { log.Warn("opentelemetry", "err", err) })
}

// Close stops the metrics server and flushes the spans not yet exported.
// It waits for every goroutine it started and is safe to call twice.
func (t *Telemetry) Close() error {
	t.closeOnce.Do(func() {
		if t.server != nil {
			if err := t.server.Close(); err != nil {
				t.log.Debug("metrics server close", "err", err)
			}
		}
		if t.tracing != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err := t.tracing.Shutdown(ctx); err != nil {
				t.log.Warn("flushing trace spans", "err", err)
			}
			cancel()
		}
	})
	return nil
}
