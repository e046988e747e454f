package rank

import (
	"context"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/internal/poll"
	"github.com/tpcoord/tpcoord/rank/client"
)

func TestNewMetricsRegistersOnce(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := NewMetrics(reg); err != nil {
		t.Fatal(err)
	}
	if _, err := NewMetrics(reg); err == nil {
		t.Error("registering the metrics twice on one registry succeeded")
	}
	var m *Metrics
	if m.Ready() {
		t.Error("nil metrics are ready")
	}
}

// scrape returns reg's /metrics text.
func scrape(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("/metrics: %d %s", rec.Code, rec.Body.String())
	}
	return rec.Body.String()
}

// sample returns the value of the sample named by series (name and
// labels as exposed), or -1.
func sample(text, series string) float64 {
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`)
	m := re.FindStringSubmatch(text)
	if m == nil {
		return -1
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return -1
	}
	return v
}

// TestMetricsScrapeCluster runs two ranks with metrics and tracing on,
// generates, and scrapes each rank's registry.
func TestMetricsScrapeCluster(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	hub := broadcast.NewHub()
	ranks, regs, metrics := startMetricsRanks(t, hub, tp)
	requester := hub.Connect()
	t.Cleanup(requester.Close)
	poll.Until(t, 10*time.Second, "ranks never became ready", func() bool {
		return metrics[0].Ready() && metrics[1].Ready()
	})
	rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer rcancel()
	rep, err := client.Generate(rctx, requester, drvSubj, &api.GenerateRequest{PromptTokenIDs: []int32{3, 4}, MaxTokens: 5}, nil)
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "follower did not catch up", func() bool {
		return ranks[1].d.Status().Step == ranks[0].d.Status().Step
	})

	r0 := scrape(t, regs[0])
	checkSeriesAtLeast(t, "rank 0", r0, map[string]float64{
		`tpcoord_step_phase_seconds_count{phase="await"}`:                       1,
		`tpcoord_step_phase_seconds_count{phase="publish"}`:                     1,
		`tpcoord_step_phase_seconds_count{phase="forward"}`:                     1,
		`tpcoord_step_phase_seconds_count{phase="sample"}`:                      1,
		`tpcoord_sampler_seconds_per_row_count`:                                 1,
		`tpcoord_requests_total{finish_reason="` + rep.FinishReason + `"}`:      1,
		`tpcoord_output_tokens_total{finish_reason="` + rep.FinishReason + `"}`: float64(len(rep.Tokens)),
		`tpcoord_rank_state{state="running"}`:                                   1,
		`tpcoord_peers_present`:                                                 1,
		`tpcoord_step`:                                                          1,
	})
	if v := sample(r0, `tpcoord_rank_state{state="aborted"}`); v != 0 {
		t.Errorf("rank 0: aborted state = %v, want 0", v)
	}
	r1 := scrape(t, regs[1])
	checkSeriesAtLeast(t, "rank 1", r1, map[string]float64{
		`tpcoord_step_phase_seconds_count{phase="await"}`:   1,
		`tpcoord_step_phase_seconds_count{phase="forward"}`: 1,
		`tpcoord_broadcast_delay_seconds_count`:             1,
		`tpcoord_rank_state{state="running"}`:               1,
	})
	if strings.Contains(r1, `phase="sample"`) && sample(r1, `tpcoord_step_phase_seconds_count{phase="sample"}`) > 0 {
		t.Error("rank 1 observed a sample phase")
	}

	// Status carries the flight recorder's view.
	st := ranks[0].d.Status()
	if st.Phase == "" || len(st.RecentSteps) == 0 {
		t.Errorf("rank 0 status: phase %q, %d recent steps; want both", st.Phase, len(st.RecentSteps))
	}
	checkRequestSpan(t, rec.Ended(), rep)
}

// startMetricsRanks starts a two-rank job on hub, each rank with its own
// metrics registry and tracing every step on tp; the test's cleanup stops
// the ranks.
func startMetricsRanks(t *testing.T, hub *broadcast.Hub, tp *sdktrace.TracerProvider) ([]*runningRank, []*prometheus.Registry, []*Metrics) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var (
		ranks   []*runningRank
		regs    []*prometheus.Registry
		metrics []*Metrics
	)
	for r := range 2 {
		reg := prometheus.NewRegistry()
		m, err := NewMetrics(reg)
		if err != nil {
			t.Fatal(err)
		}
		if m.Ready() {
			t.Errorf("rank %d ready before its driver exists", r)
		}
		cfg := driverConfig(r, 2)
		cfg.Tracer, cfg.TraceEvery, cfg.Metrics = tp.Tracer("tpcoord"), 1, m
		regs, metrics = append(regs, reg), append(metrics, m)
		ranks = append(ranks, startRank(t, ctx, hub, cfg))
	}
	t.Cleanup(func() {
		cancel()
		for _, r := range ranks {
			_ = r.wait(t)
		}
	})
	return ranks, regs, metrics
}

// checkSeriesAtLeast checks that every series in want has at least its
// value in the scraped text of rank (absent series count as -1).
func checkSeriesAtLeast(t *testing.T, rank, text string, want map[string]float64) {
	t.Helper()
	for series, least := range want {
		if v := sample(text, series); v < least {
			t.Errorf("%s: %s = %v, want >= %v", rank, series, v, least)
		}
	}
}

// checkRequestSpan checks that rank 0 traced the request from admission
// to finish: a request span whose attributes match the reply.
func checkRequestSpan(t *testing.T, spans []sdktrace.ReadOnlySpan, rep *api.GenerateReply) {
	t.Helper()
	var found bool
	for _, s := range spans {
		if s.Name() != requestSpanName {
			continue
		}
		found = true
		attrs := map[attribute.Key]attribute.Value{}
		for _, a := range s.Attributes() {
			attrs[a.Key] = a.Value
		}
		if fr := attrs["gen_ai.response.finish_reasons"].AsStringSlice(); len(fr) != 1 || fr[0] != rep.FinishReason ||
			attrs["gen_ai.usage.output_tokens"].AsInt64() != int64(len(rep.Tokens)) ||
			attrs["gen_ai.usage.input_tokens"].AsInt64() != 2 || attrs["tpc.request.seq"].Type() != attribute.INT64 {
			t.Errorf("request span attributes %v", s.Attributes())
		}
	}
	if !found {
		t.Error("no request span")
	}
}
