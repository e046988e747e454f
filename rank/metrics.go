package rank

import (
	"maps"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/broadcast/api"
)

// Metrics are one rank's Prometheus metrics. Create them once per process
// with NewMetrics on a registry the caller owns, and give them to every
// epoch's driver through DriverConfig.Metrics; the driver of the latest
// epoch is the one scrapes read. A nil *Metrics records nothing.
//
// The decode loop only observes histograms it resolved at construction
// (no allocation per step); state that status already tracks (rank state,
// peers, refused messages, noise pool) is read at scrape time.
type Metrics struct {
	phase     [numLoopPhases]prometheus.Observer
	samplePer prometheus.Observer
	bcast     prometheus.Observer
	requests  *prometheus.CounterVec
	tokens    *prometheus.CounterVec
	preempts  prometheus.Counter
	// prefixQueries and prefixHits: rank 0's prefix cache lookups, in
	// tokens.
	prefixQueries, prefixHits prometheus.Counter

	src atomic.Pointer[Driver]
	// Addr is where the metrics are served, for status replies.
	Addr string

	mu           sync.Mutex
	rejectedBase map[string]uint64 // refused by earlier epochs' drivers
	kvSeen       api.KVStatus      // the attached driver's counts already added to the counters

	stateDesc, peersDesc, refusedDesc, stepDesc  *prometheus.Desc
	kvUsageDesc, stepTokensDesc                  *prometheus.Desc
	poolReadyDesc, poolInlineDesc, poolTakenDesc *prometheus.Desc
}

// rankStates are the values of tpcoord_rank_state's state label.
var rankStates = []broadcast.Phase{broadcast.PhaseJoining, broadcast.PhaseReady, broadcast.PhaseRunning, broadcast.PhaseStopping, broadcast.PhaseAborted}

// NewMetrics creates the metrics and registers them on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	// Steps take from tens of microseconds (no rows) to seconds (a large
	// model's forward).
	stepBuckets := prometheus.ExponentialBuckets(25e-6, 2, 18)
	phase := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "tpcoord_step_phase_seconds",
		Help:    "Time one step spent in each phase of the decode loop (await: rank 0 waits for followers within max-lag, followers wait for the step message; publish, sample, reply: rank 0 only).",
		Buckets: stepBuckets,
	}, []string{"phase"})
	samplePer := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "tpcoord_sampler_seconds_per_row",
		Help:    "Rank 0's sampler latency: one step's sample phase divided by its rows.",
		Buckets: prometheus.ExponentialBuckets(1e-6, 2, 18),
	})
	bcast := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "tpcoord_broadcast_delay_seconds",
		Help:    "Followers: receive time of a step message minus rank 0's send time (traced steps only, which carry the send time; clocks of different hosts must agree).",
		Buckets: prometheus.ExponentialBuckets(10e-6, 2, 16),
	})
	m := &Metrics{
		samplePer: samplePer,
		bcast:     bcast,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tpcoord_requests_total",
			Help: "Rank 0: requests finished, by finish reason (stop, length, cancelled, error).",
		}, []string{"finish_reason"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tpcoord_output_tokens_total",
			Help: "Rank 0: output tokens of finished requests, by finish reason.",
		}, []string{"finish_reason"}),
		preempts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tpcoord_num_preemptions_total",
			Help: "Rank 0: requests preempted (their KV blocks freed, to be recomputed) because a running sequence needed a block and none was free.",
		}),
		prefixQueries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tpcoord_prefix_cache_queries_total",
			Help: "Rank 0: tokens looked up in the prefix cache (every admitted request's prompt and output), as vLLM's vllm:prefix_cache_queries.",
		}),
		prefixHits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tpcoord_prefix_cache_hits_total",
			Help: "Rank 0: tokens found in the prefix cache, whose KV blocks were shared instead of computed, as vLLM's vllm:prefix_cache_hits.",
		}),
		kvUsageDesc: prometheus.NewDesc("tpcoord_kv_cache_usage_perc",
			"Rank 0: the fraction of the KV cache's blocks held by sequences (1 means 100 percent), as vLLM's vllm:kv_cache_usage_perc.", nil, nil),
		stepTokensDesc: prometheus.NewDesc("tpcoord_step_tokens_max",
			"The most tokens one step's forward pass fed in this epoch, summed over its rows (one per decoding row, the chunk of a prompt being prefilled); --max-num-batched-tokens bounds it.", nil, nil),
		rejectedBase: map[string]uint64{},
		stateDesc:    prometheus.NewDesc("tpcoord_rank_state", "1 for the state this rank is in (joining, ready, running, stopping, aborted), 0 for the others.", []string{"state"}, nil),
		peersDesc:    prometheus.NewDesc("tpcoord_peers_present", "Rank 0: followers that sent a heartbeat in this epoch within the last few heartbeat intervals.", nil, nil),
		stepDesc:     prometheus.NewDesc("tpcoord_step", "Last step this rank applied.", nil, nil),
		refusedDesc:  prometheus.NewDesc("tpcoord_refused_messages_total", "Messages refused (malformed, stale epoch, wrong sender, …) or ignored as duplicates, by kind.", []string{"kind"}, nil),
		poolReadyDesc: prometheus.NewDesc("tpcoord_noise_pool_rows_ready",
			"Rank 0: noise rows generated ahead and ready to be taken.", nil, nil),
		poolInlineDesc: prometheus.NewDesc("tpcoord_noise_rows_inline_total",
			"Rank 0: noise rows generated inline by the sampler because the pool had none ready.", nil, nil),
		poolTakenDesc: prometheus.NewDesc("tpcoord_noise_rows_taken_total",
			"Rank 0: noise rows taken from the pool.", nil, nil),
	}
	for p := PhaseAwait; p < numLoopPhases; p++ {
		m.phase[p] = phase.WithLabelValues(p.String())
	}
	for _, c := range []prometheus.Collector{phase, samplePer, bcast, m.requests, m.tokens, m.preempts, m.prefixQueries, m.prefixHits, (*scrapeCollector)(m)} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Ready reports whether the rendezvous is complete and a decode loop is
// running (for /readyz).
func (m *Metrics) Ready() bool {
	if m == nil {
		return false
	}
	d := m.src.Load()
	if d == nil {
		return false
	}
	d.mu.Lock()
	p := d.pos.phase
	d.mu.Unlock()
	return p == broadcast.PhaseReady || p == broadcast.PhaseRunning
}

// attach makes d the driver scrapes read, keeping the refused-message
// counts of the one it replaces so the counters never go down.
func (m *Metrics) attach(d *Driver) {
	if m == nil {
		return
	}
	prev := m.src.Swap(d)
	m.mu.Lock()
	m.kvSeen = api.KVStatus{} // a new driver counts its epoch's from 0
	m.mu.Unlock()
	if prev == nil {
		return
	}
	prev.mu.Lock()
	old := maps.Clone(prev.rejected)
	prev.mu.Unlock()
	m.mu.Lock()
	for k, v := range old {
		m.rejectedBase[k] += v
	}
	m.mu.Unlock()
}

func (m *Metrics) observeStep(e *flightEntry) {
	if m == nil {
		return
	}
	for p := PhaseAwait; p < numLoopPhases; p++ {
		if e.dur[p] > 0 {
			m.phase[p].Observe(float64(e.dur[p]) / 1e9)
		}
	}
	if e.rows > 0 && e.dur[PhaseSample] > 0 {
		m.samplePer.Observe(float64(e.dur[PhaseSample]) / 1e9 / float64(e.rows))
	}
}

// sentHeader is the step message header carrying rank 0's send time in
// unix nanoseconds, for the broadcast delay metric.
const sentHeader = "tpc-sent-ns"

// stampSent adds the send time to a traced step's header. Untraced steps
// (h == nil) carry no header, so stamping costs nothing on most steps.
func stampSent(h map[string]string) map[string]string {
	if h != nil {
		h[sentHeader] = strconv.FormatInt(time.Now().UnixNano(), 10)
	}
	return h
}

// observeBroadcast records a step message's delay from its send stamp.
func (m *Metrics) observeBroadcast(h map[string]string, now time.Time) {
	if m == nil || h == nil {
		return
	}
	s, ok := h[sentHeader]
	if !ok {
		return
	}
	ns, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return
	}
	if d := now.UnixNano() - ns; d >= 0 {
		m.bcast.Observe(float64(d) / 1e9)
	}
}

// scrapeCollector reads the attached driver's state at scrape time.
type scrapeCollector Metrics

func (c *scrapeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.stateDesc, c.peersDesc, c.stepDesc, c.refusedDesc, c.poolReadyDesc, c.poolInlineDesc, c.poolTakenDesc, c.kvUsageDesc, c.stepTokensDesc} {
		ch <- d
	}
}

func (c *scrapeCollector) Collect(ch chan<- prometheus.Metric) {
	m := (*Metrics)(c)
	refused := map[string]uint64{}
	m.mu.Lock()
	maps.Copy(refused, m.rejectedBase)
	m.mu.Unlock()
	state := broadcast.PhaseJoining
	d := m.src.Load()
	if d != nil {
		now := d.cfg.Clock()
		window := 3 * d.cfg.Heartbeat
		if d.cfg.HeartbeatTimeout > window {
			window = d.cfg.HeartbeatTimeout
		}
		d.mu.Lock()
		state = d.pos.phase
		applied := d.pos.applied
		for k, v := range d.rejected {
			refused[k] += v
		}
		present := d.peerTab.Present(now, window)
		kv := d.pos.kv
		d.mu.Unlock()
		if kv != nil {
			ch <- prometheus.MustNewConstMetric(c.kvUsageDesc, prometheus.GaugeValue, float64(kv.Used)/float64(kv.Blocks))
		}
		ch <- prometheus.MustNewConstMetric(c.stepDesc, prometheus.GaugeValue, float64(applied))
		ch <- prometheus.MustNewConstMetric(c.stepTokensDesc, prometheus.GaugeValue, float64(d.maxStepTokens.Load()))
		if d.cfg.Rank == 0 {
			ch <- prometheus.MustNewConstMetric(c.peersDesc, prometheus.GaugeValue, float64(present))
			if sp, ok := d.pick.(interface{ Stats() map[string]uint64 }); ok {
				if s := sp.Stats(); s != nil {
					ch <- prometheus.MustNewConstMetric(c.poolReadyDesc, prometheus.GaugeValue, float64(s["noise_rows_ready"]))
					ch <- prometheus.MustNewConstMetric(c.poolInlineDesc, prometheus.CounterValue, float64(s["noise_rows_inline"]))
					ch <- prometheus.MustNewConstMetric(c.poolTakenDesc, prometheus.CounterValue, float64(s["noise_rows_taken"]))
				}
			}
		}
	}
	for _, p := range rankStates {
		v := 0.0
		if p == state {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(c.stateDesc, prometheus.GaugeValue, v, p.String())
	}
	for k, v := range refused {
		ch <- prometheus.MustNewConstMetric(c.refusedDesc, prometheus.CounterValue, float64(v), k)
	}
}

// kvCounts adds the attached driver's preemptions and prefix cache
// lookups up to kv's (its epoch's counts so far) to the counters that
// outlive epochs.
func (m *Metrics) kvCounts(kv *api.KVStatus) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	catchUp(m.preempts, &m.kvSeen.Preemptions, kv.Preemptions)
	catchUp(m.prefixQueries, &m.kvSeen.PrefixCacheQueries, kv.PrefixCacheQueries)
	catchUp(m.prefixHits, &m.kvSeen.PrefixCacheHits, kv.PrefixCacheHits)
}

// catchUp adds to c what total has grown by since *seen.
func catchUp(c prometheus.Counter, seen *uint64, total uint64) {
	if total > *seen {
		c.Add(float64(total - *seen))
		*seen = total
	}
}

// attachTelemetry links the driver to its flight recorder and metrics.
// NewDriver calls it once.
func (d *Driver) attachTelemetry() {
	if d.cfg.Flight == nil {
		d.cfg.Flight = NewFlightRecorder(0)
	}
	d.cfg.Flight.mu.Lock()
	d.cfg.Flight.metrics = d.cfg.Metrics
	d.cfg.Flight.mu.Unlock()
	d.cfg.Metrics.attach(d)
}

// fillTelemetry adds the flight recorder's view and the metrics address
// to a status reply.
func (d *Driver) fillTelemetry(st *api.RankStatus) {
	d.cfg.Flight.fillStatus(st, time.Now())
	if d.cfg.Metrics != nil {
		st.MetricsAddr = d.cfg.Metrics.Addr
	}
}

// requestFinished ends r's span and counts it.
func (d *Driver) requestFinished(r *Request, now time.Time) {
	if m := d.cfg.Metrics; m != nil {
		m.requests.WithLabelValues(r.Finish).Inc()
		m.tokens.WithLabelValues(r.Finish).Add(float64(len(r.Output)))
	}
	endSpan(r, r.Finish, r.Err, now)
}
