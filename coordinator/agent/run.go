package agent

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/broadcast/natsbus"
	"github.com/tpcoord/tpcoord/coordinator/membership"
	"github.com/tpcoord/tpcoord/internal/fielderr"
	"github.com/tpcoord/tpcoord/internal/lifecycle"
	"github.com/tpcoord/tpcoord/internal/telemetry"
	"github.com/tpcoord/tpcoord/noisepool"
	"github.com/tpcoord/tpcoord/rank"
)

// run is one Run's state: what it made, owned by g.
type run struct {
	a   *Agent
	log *slog.Logger
	g   *lifecycle.Group

	tel *telemetry.Telemetry
	// metrics (nil without a metrics server) and flight are the rank's,
	// served and dumped by tel, handed to every epoch's driver.
	metrics  *rank.Metrics
	flight   *rank.FlightRecorder
	bus      *Bus
	cl       *membership.Cluster
	leader   uint32                // rank 0: the publisher ID it stamps on its steps
	key      broadcast.Key         // the job's message key (nil: none)
	gossip   membership.GossipKeys // the gossip keyring (nil: none)
	clean    bool                  // the agent stops cleanly: leave announcing it
	grammars *rank.GrammarSet      // rank 0 with a tokenizer: structured outputs
}

func newRun(a *Agent) *run {
	return &run{a: a, log: a.log, g: lifecycle.New(a.log)}
}

// run is the agent's life: telemetry, bus, membership, rendezvous, then the
// decode loop across epochs.
func (r *run) run(ctx context.Context) error {
	cfg := &r.a.cfg
	var err error
	if r.key, err = readJobKey(cfg.JobKeyFile); err != nil {
		return err
	}
	if r.gossip, err = readGossipKeys(cfg.GossipKeyFile); err != nil {
		return err
	}
	// The essentials at info, on a line that fits a terminal; the rest at
	// debug.
	r.log.Info("agent starting", "version", r.a.o.version, "world_size", cfg.WorldSize, "executor", cfg.Executor)
	r.log.Debug("agent configuration", "bind", cfg.Bind, "join", cfg.Join, "nats", natsbus.Redact(cfg.NATS),
		"job_key_file", cfg.JobKeyFile, "gossip_key_file", cfg.GossipKeyFile, "gossip_keys", len(r.gossip))
	r.warnExposures()
	if err := r.startTelemetry(ctx); err != nil {
		return err
	}
	if err := r.connectBus(ctx); err != nil {
		return r.a.stopped(ctx, "NATS was reachable", err)
	}
	// The member first, so that peers can join this rank (rank 0 is every
	// rank's seed) while it makes its noise pool; the pool before the
	// rendezvous, which rank 0 spends waiting for the last rank to start:
	// its allocation (tens of MiB) then no longer follows the rendezvous on
	// the way to readiness. The pool fills rows only for active streams, so
	// it takes no CPU from the rendezvous.
	if err := r.startMember(); err != nil {
		return r.a.stopped(ctx, "rendezvous completed", err)
	}
	picker, err := r.sampling()
	if err != nil {
		return err
	}
	members, err := r.rendezvous(ctx)
	if err != nil {
		return r.a.stopped(ctx, "rendezvous completed", err)
	}
	r.a.o.notifier.Notify(fmt.Sprintf("READY=1\nSTATUS=rendezvous complete: %d ranks of job %s", cfg.WorldSize, cfg.Job))
	_ = r.g.AddCloser("notify stopping", func() error { r.a.o.notifier.Notify("STOPPING=1"); return nil })
	w := &world{r: r, picker: picker}
	if err := w.adopt(members); err != nil {
		return err
	}
	err = w.loop(ctx)
	r.clean = err == nil
	return err
}

func (r *run) startTelemetry(ctx context.Context) error {
	cfg := &r.a.cfg
	r.flight = rank.NewFlightRecorder(cfg.Telemetry.FlightSteps)
	hooks := telemetry.Rank{Flight: r.flight, Metrics: func(reg prometheus.Registerer) (func() bool, error) {
		m, err := rank.NewMetrics(reg)
		if err != nil {
			return nil, err
		}
		r.metrics = m
		return m.Ready, nil
	}}
	tel, err := telemetry.Start(ctx, cfg.Telemetry, telemetry.Labels{Job: cfg.Job, Rank: cfg.Rank}, hooks, r.a.o.getenv, r.log)
	if err != nil {
		return fielderr.Within("Telemetry", err)
	}
	if r.metrics != nil {
		r.metrics.Addr = tel.MetricsAddr()
	}
	r.tel = tel
	r.a.setTelemetry(tel)
	_ = r.g.AddCloser("telemetry", func() error {
		r.a.setTelemetry(nil)
		return tel.Close()
	})
	return nil
}

func (r *run) connectBus(ctx context.Context) error {
	if r.a.o.bus != nil {
		r.bus = r.a.o.bus
		return nil
	}
	bus, err := r.connectNATS(ctx, r.g)
	if err != nil {
		return err
	}
	r.bus = bus
	return nil
}

// leaveTimeout bounds the goodbye: the leaving announcement's gossip (it
// returns as soon as that is done, normally a few gossip intervals) and
// memberlist's own leave message.
const leaveTimeout = 3 * time.Second

// startMember starts this rank's member: peers can join it from now on.
// A clean stop leaves the cluster announcing it (peers stop cleanly too);
// an agent that fails leaves without the announcement, so peers see a lost
// rank and apply OnPeerLoss.
func (r *run) startMember() error {
	cfg := &r.a.cfg
	var err error
	if cfg.Rank == 0 {
		if r.leader, err = newLeaderID(); err != nil {
			return err
		}
	}
	masterPort := 0
	if cfg.Rank == 0 && cfg.needsMasterPort() {
		// Not the member's own port: launch picked it from the same range,
		// and it is bound only below.
		if masterPort, err = pickMasterPort(r.bindPort()); err != nil {
			return err
		}
	}
	cl, err := membership.Start(membership.Config{
		GossipKeys: r.gossip, ClaimWait: cfg.RankClaimWait, Transport: r.a.o.transport,
		ProbeInterval: cfg.Gossip.ProbeInterval, ProbeTimeout: cfg.Gossip.ProbeTimeout,
		GossipInterval: cfg.Gossip.GossipInterval, SuspicionMult: cfg.Gossip.SuspicionMult,
		Meta: membership.Meta{Job: cfg.Job, Rank: cfg.Rank, World: cfg.WorldSize, Digest: cfg.Digest(), NATS: natsbus.Redact(cfg.NATS),
			Version: r.a.o.version, Proto: broadcast.Version, Leader: r.leader, MasterPort: masterPort},
		Bind: cfg.Bind, Join: cfg.Join, Local: cfg.Local, Logger: r.log,
	})
	if err != nil {
		return err
	}
	r.cl = cl
	_ = r.g.AddCloser("membership", func() error {
		if r.clean {
			return cl.Leave(leaveTimeout)
		}
		return cl.Abandon(leaveTimeout)
	})
	r.log.Info("membership started", "member", cl.Name(), "addr", cl.Addr())
	return nil
}

// rendezvous joins the peers and waits until every rank is present.
func (r *run) rendezvous(ctx context.Context) ([]membership.Member, error) {
	rctx, cancel := context.WithTimeout(ctx, r.a.cfg.RendezvousTimeout)
	defer cancel()
	return r.cl.Rendezvous(rctx)
}

// bindPort is the port of the member's bind address (0: any).
func (r *run) bindPort() int {
	_, port, _ := net.SplitHostPort(r.a.cfg.Bind)
	p, _ := strconv.Atoi(port)
	return p
}

// sampling builds the picker of a rank that samples, with its noise pool.
func (r *run) sampling() (*rank.Sampling, error) {
	cfg := &r.a.cfg
	base, err := noisepool.NewBase(rand.Reader)
	if err != nil {
		return nil, err
	}
	var pool *noisepool.Pool
	if cfg.Noise == NoisePool && cfg.Samples() {
		if pool, err = noisepool.New(cfg.NoisePool); err != nil {
			return nil, fielderr.Within("NoisePool", err)
		}
		_ = r.g.AddCloser("noise pool", func() error { pool.Close(); return nil })
		r.logPool(pool)
	}
	noise := map[Noise]rank.NoiseMode{NoiseInline: rank.NoiseInline, NoisePool: rank.NoisePool, NoiseSync: rank.NoiseSync}[cfg.Noise]
	if noise == rank.NoisePool && pool == nil {
		noise = rank.NoiseInline // a follower that does not sample
	}
	if err := r.loadGrammars(); err != nil {
		return nil, err
	}
	sc := rank.SamplingConfig{
		Vocab: cfg.Vocab, EOS: int32(cfg.EOS), Base: base, Noise: noise, Pool: pool, Softmax: cfg.Sampling == SamplingSoftmax,
	}
	if r.grammars != nil {
		sc.Grammars = r.grammars
	}
	return rank.NewSamplingWith(sc), nil
}

// loadGrammars reads the tokenizer's vocabulary on a rank that samples,
// for structured outputs.
func (r *run) loadGrammars() error {
	cfg := &r.a.cfg
	if cfg.Tokenizer == "" || !cfg.Samples() {
		return nil
	}
	start := time.Now()
	pieces, special, err := r.a.o.vocab(cfg.Tokenizer)
	if err != nil {
		return fielderr.New("Tokenizer", "%w", err)
	}
	if len(pieces) > cfg.Vocab {
		r.log.Warn("the tokenizer has more tokens than the model's vocabulary: structured outputs never choose those past it",
			"tokenizer_tokens", len(pieces), "vocab", cfg.Vocab)
	}
	r.grammars = rank.NewGrammarSet(pieces, special)
	r.log.Info("structured outputs: tokenizer read", "tokenizer", cfg.Tokenizer, "tokens", len(pieces), "took", time.Since(start).Round(time.Millisecond).String())
	return nil
}

// readGossipKeys reads the gossip keyring; "" means gossip in the clear.
func readGossipKeys(path string) (membership.GossipKeys, error) {
	if path == "" {
		return nil, nil
	}
	keys, err := membership.ReadKeyring(path)
	if err != nil {
		return nil, fielderr.New("GossipKeyFile", "%w", err)
	}
	return keys, nil
}

// warnExposures logs, once at start, what an Insecure configuration
// leaves open (Validate refused it otherwise).
func (r *run) warnExposures() {
	exp := r.a.cfg.Exposures()
	if len(exp) == 0 {
		return
	}
	what := make([]string, len(exp))
	for i, e := range exp {
		what[i] = e.String()
	}
	r.log.Warn("insecure configuration accepted: "+strings.Join(what, "; "), "insecure", true)
}

// readJobKey reads the job's message key; "" means the job has none.
func readJobKey(path string) (broadcast.Key, error) {
	if path == "" {
		return nil, nil
	}
	key, err := broadcast.ReadKeyFile(path)
	if err != nil {
		return nil, fielderr.New("JobKeyFile", "%w", err)
	}
	return key, nil
}

// newLeaderID picks rank 0's random non-zero publisher ID.
func newLeaderID() (uint32, error) {
	var b [4]byte
	for {
		if _, err := rand.Read(b[:]); err != nil {
			return 0, err
		}
		if id := binary.LittleEndian.Uint32(b[:]); id != 0 {
			return id, nil
		}
	}
}

// logPool reports the pool's size and, when it sized its own producers,
// what a batch of rows costs and whether they keep up.
func (r *run) logPool(pool *noisepool.Pool) {
	c, z := pool.Config(), pool.Sizing()
	args := []any{"rows", c.Rows, "producers", c.Producers, "form", c.Form.String(), "mib", c.Bytes() >> 20}
	if z.NsPerValue > 0 {
		args = append(args, "ns_per_value", fmt.Sprintf("%.2f", z.NsPerValue), "cores_needed", fmt.Sprintf("%.2f", z.Need))
	}
	r.log.Info("noise pool started", args...)
	if !z.KeepsUp {
		r.log.Warn("noise producers cannot keep up: rank 0 will generate some rows inline, on the step's critical path",
			"batch", c.Batch, "step", c.Step, "cores_needed", fmt.Sprintf("%.2f", z.Need), "producers", c.Producers)
	}
}
