package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tpcoord/tpcoord/internal/buildinfo"
	"github.com/tpcoord/tpcoord/internal/fielderr"
)

// metricsServer serves /metrics, /healthz and /readyz (and their
// aliases /health and /ready).
type metricsServer struct {
	srv  *http.Server
	ln   net.Listener
	done chan struct{}
}

// newMetricsRegistry is the agent's own registry (no global state): the
// rank's collectors (what rank registers), the build's info, and the Go
// runtime and process collectors. ready answers /readyz.
func newMetricsRegistry(rank func(prometheus.Registerer) (func() bool, error)) (_ *prometheus.Registry, ready func() bool, _ error) {
	reg := prometheus.NewRegistry()
	if err := reg.Register(BuildInfoGauge(buildinfo.Get())); err != nil {
		return nil, nil, err
	}
	if err := reg.Register(collectors.NewGoCollector()); err != nil {
		return nil, nil, err
	}
	if err := reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, nil, err
	}
	ready = func() bool { return true }
	if rank != nil {
		r, err := rank(reg)
		if err != nil {
			return nil, nil, err
		}
		ready = r
	}
	return reg, ready, nil
}

// BuildInfoGauge is the usual constant 1 whose labels say which build runs,
// so a dashboard can tell ranks running different builds apart.
func BuildInfoGauge(i buildinfo.Info) prometheus.Collector {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tpcoord_build_info",
		Help: "1, labelled with the version, commit and Go version of the running binary.",
	}, []string{"version", "commit", "modified", "go_version"})
	g.WithLabelValues(i.Version, i.Commit, strconv.FormatBool(i.Modified), i.GoVersion).Set(1)
	return g
}

// startMetricsServer listens on addr and serves reg; ready answers /readyz.
// Close stops it and waits for its goroutine.
func startMetricsServer(addr string, reg *prometheus.Registry, ready func() bool, log *slog.Logger) (*metricsServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fielderr.New("MetricsAddr", "%w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	live := func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	}
	readyz := func(w http.ResponseWriter, _ *http.Request) {
		if !ready() {
			http.Error(w, "not ready: rendezvous incomplete or decode loop not running", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	}
	// /health and /ready are the gateway's spellings (vLLM's), aliases.
	mux.HandleFunc("/healthz", live)
	mux.HandleFunc("/health", live)
	mux.HandleFunc("/readyz", readyz)
	mux.HandleFunc("/ready", readyz)
	s := &metricsServer{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}, ln: ln, done: make(chan struct{})}
	go func() { // owned by s: Close waits for it
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
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
