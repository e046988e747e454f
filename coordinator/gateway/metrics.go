package gateway

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/internal/buildinfo"
	"github.com/tpcoord/tpcoord/internal/telemetry"
)

// metrics are the gateway's Prometheus metrics. They keep vLLM's names
// with tpcoord_ in place of vllm: (docs/observability.md has the table),
// so vLLM dashboards work with a prefix changed. Latencies are what a
// client of this gateway sees; queue time and the running and waiting
// gauges are rank 0's.
type metrics struct {
	reg          *prometheus.Registry
	ttft, itl    prometheus.Observer
	e2e, queue   prometheus.Observer
	prompt, gen  prometheus.Counter
	finished     *prometheus.CounterVec
	running      prometheus.Gauge // this gateway's requests in flight
	resumed      prometheus.Counter
	httpRequests *prometheus.CounterVec
	job          *jobGauges
}

func newMetrics(g *Gateway) *metrics {
	model := prometheus.Labels{"model_name": g.cfg.Model}
	hist := func(name, help string, buckets []float64) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets, ConstLabels: model})
	}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: model})
	}
	ttft := hist("tpcoord_time_to_first_token_seconds", "Time from a request's arrival at the gateway to its first token.",
		[]float64{0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80})
	itl := hist("tpcoord_inter_token_latency_seconds", "Time between two tokens of a request, as the gateway receives them.",
		[]float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5})
	e2e := hist("tpcoord_e2e_request_latency_seconds", "Time from a request's arrival at the gateway to its end.",
		[]float64{0.01, 0.05, 0.1, 0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480})
	queue := hist("tpcoord_request_queue_time_seconds", "Time a request waited in rank 0's queue before its first step.",
		[]float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80})
	m := &metrics{
		reg: prometheus.NewRegistry(), ttft: ttft, itl: itl, e2e: e2e, queue: queue,
		prompt: counter("tpcoord_prompt_tokens_total", "Prompt tokens of the requests the gateway answered, each prompt once whatever n (as usage counts them)."),
		gen:    counter("tpcoord_generation_tokens_total", "Tokens generated for the gateway's requests."),
		finished: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tpcoord_request_success_total",
			Help: "Requests ended, by finish reason (stop, length, abort, error).", ConstLabels: model}, []string{"finished_reason"}),
		running: prometheus.NewGauge(prometheus.GaugeOpts{Name: "tpcoord_gateway_requests_in_flight",
			Help: "Requests (choices) this gateway has sent to rank 0 and not yet finished.", ConstLabels: model}),
		resumed: counter("tpcoord_requests_resubmitted_total", "Resubmissions of requests after a fault (rank 0 gone, restarted, re-forming or unreachable), each continuing from the tokens its request had."),
		httpRequests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tpcoord_http_requests_total",
			Help: "HTTP requests to /v1, by route and status class."}, []string{"route", "status"}),
	}
	m.job = newJobGauges(g, model)
	m.reg.MustRegister(ttft, itl, e2e, queue, m.prompt, m.gen, m.finished, m.running, m.resumed, m.httpRequests,
		telemetry.BuildInfoGauge(buildinfo.Get()), m.job)
	return m
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// observe records one finished choice.
func (m *metrics) observe(c *choice, end time.Time) {
	if !c.first.IsZero() {
		m.ttft.Observe(c.first.Sub(c.start).Seconds())
	}
	for _, d := range c.itl {
		m.itl.Observe(d.Seconds())
	}
	m.e2e.Observe(end.Sub(c.start).Seconds())
	if c.rep != nil && c.rep.Timings != nil {
		m.queue.Observe(c.rep.Timings.QueueMs / 1000)
	}
	m.gen.Add(float64(len(c.tokens)))
	reason := c.finishReason()
	if reason == api.FinishCancelled {
		reason = "abort" // vLLM's word
	}
	m.finished.WithLabelValues(reason).Inc()
}

// jobGauges reports rank 0's running and waiting requests, and its KV
// cache when it schedules one, asked at scrape time (at most once a
// second). The same snapshot tells /tokenize the job's context.
type jobGauges struct {
	g                                 *Gateway
	runningDesc, waitingDesc          *prometheus.Desc
	kvUsageDesc, preemptionsDesc      *prometheus.Desc
	prefixQueriesDesc, prefixHitsDesc *prometheus.Desc

	mu   sync.Mutex
	at   time.Time
	last *api.RankStatus // nil: rank 0 did not answer
}

func newJobGauges(g *Gateway, labels prometheus.Labels) *jobGauges {
	return &jobGauges{g: g,
		runningDesc:     prometheus.NewDesc("tpcoord_num_requests_running", "Requests rank 0 is decoding (rows of the batch).", nil, labels),
		waitingDesc:     prometheus.NewDesc("tpcoord_num_requests_waiting", "Requests waiting in rank 0's queue.", nil, labels),
		kvUsageDesc:     prometheus.NewDesc("tpcoord_kv_cache_usage_perc", "Fraction of rank 0's KV cache blocks held by sequences (1 is all), when it schedules one.", nil, labels),
		preemptionsDesc: prometheus.NewDesc("tpcoord_num_preemptions_total", "Requests rank 0 preempted (blocks freed, recomputed later) in its epoch, when it schedules a KV cache.", nil, labels),
		prefixQueriesDesc: prometheus.NewDesc("tpcoord_prefix_cache_queries_total",
			"Tokens rank 0 looked up in its prefix cache in its epoch (every admitted request's length), as vLLM's vllm:prefix_cache_queries.", nil, labels),
		prefixHitsDesc: prometheus.NewDesc("tpcoord_prefix_cache_hits_total",
			"Tokens rank 0 found in its prefix cache in its epoch (not computed again), as vLLM's vllm:prefix_cache_hits.", nil, labels)}
}

// rank0 is rank 0's status as last asked (at most once a second), or nil
// when it did not answer then.
func (j *jobGauges) rank0() *api.RankStatus {
	j.mu.Lock()
	defer j.mu.Unlock()
	if time.Since(j.at) > time.Second {
		ctx, cancel := context.WithTimeout(context.Background(), j.g.cfg.StatusWait)
		st, err := j.g.rank0Status(ctx)
		cancel()
		j.at, j.last = time.Now(), st
		if err != nil {
			j.last = nil // no figure rather than a stale one
		}
	}
	return j.last
}

func (j *jobGauges) Describe(ch chan<- *prometheus.Desc) {
	ch <- j.runningDesc
	ch <- j.waitingDesc
	ch <- j.kvUsageDesc
	ch <- j.preemptionsDesc
	ch <- j.prefixQueriesDesc
	ch <- j.prefixHitsDesc
}

func (j *jobGauges) Collect(ch chan<- prometheus.Metric) {
	st := j.rank0()
	if st == nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(j.runningDesc, prometheus.GaugeValue, float64(st.Rows))
	ch <- prometheus.MustNewConstMetric(j.waitingDesc, prometheus.GaugeValue, float64(st.Waiting))
	if kv := st.KV; kv != nil && kv.Blocks > 0 {
		ch <- prometheus.MustNewConstMetric(j.kvUsageDesc, prometheus.GaugeValue, float64(kv.Used)/float64(kv.Blocks))
		ch <- prometheus.MustNewConstMetric(j.preemptionsDesc, prometheus.CounterValue, float64(kv.Preemptions))
		ch <- prometheus.MustNewConstMetric(j.prefixQueriesDesc, prometheus.CounterValue, float64(kv.PrefixCacheQueries))
		ch <- prometheus.MustNewConstMetric(j.prefixHitsDesc, prometheus.CounterValue, float64(kv.PrefixCacheHits))
	}
}
