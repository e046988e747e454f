package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.opentelemetry.io/otel"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/broadcast/natsbus"
	"github.com/tpcoord/tpcoord/coordinator/membership"
	"github.com/tpcoord/tpcoord/noisepool"
	"github.com/tpcoord/tpcoord/rank"
)

const wireVersion = broadcast.Version

// maxWorldSize bounds --world-size (and what status believes of replies).
const maxWorldSize = 1024

// agentConfig is everything one rank needs. Flags, TPC_* variables and the
// YAML file all land here (see layerConfig).
type agentConfig struct {
	Config    string
	Job       string
	Rank      int
	WorldSize int
	Bind      string
	Join      []string
	Local     bool
	NATS      string
	NATSServe bool
	natsAuth
	workerOpts
	telemetryOpts
	Prefix            string
	Executor          string
	Vocab             int
	EOS               int
	MaxBatch          int
	MaxQueue          int
	MaxBatchTokens    int
	MaxLag            int
	ForwardTime       time.Duration
	RendezvousTimeout time.Duration
	HeartbeatInterval time.Duration
	HeartbeatTimeout  time.Duration
	OnPeerLoss        string
	GossipKeyFile     string
	RankClaimWait     time.Duration
	Gossip            gossipTuning
	ReplayWindow      int
	ReplayWindowBytes int
	StepQueueBytes    int
	Noise             string
	Sampling          string
	SamplingRanks     string
	NoisePool         noisepool.Config
	TraceEvery        int
	LogLevel          string
	LogFormat         string
}

func (c *agentConfig) flags(fs *pflag.FlagSet) {
	fs.StringVar(&c.Config, "config", "", "YAML config file; keys are flag names (precedence: flag > TPC_* env > file > default)")
	fs.StringVar(&c.Job, "job", "default", "job ID: names the NATS subjects and the memberlist label")
	fs.IntVar(&c.Rank, "rank", 0, "this agent's TP rank, 0..world-size-1 (rank 0 schedules and samples)")
	fs.IntVar(&c.WorldSize, "world-size", 1, "number of TP ranks in the job")
	fs.StringVar(&c.Bind, "bind", "0.0.0.0:7946", "memberlist bind address host:port (port 0 picks a free one)")
	fs.StringSliceVar(&c.Join, "join", nil, "comma-separated memberlist peers host:port to join")
	fs.BoolVar(&c.Local, "local", false, "use memberlist's fast loopback timings (all ranks on one host)")
	fs.StringVar(&c.NATS, "nats", "nats://127.0.0.1:4222", "NATS server URL")
	fs.BoolVar(&c.NATSServe, "nats-serve", false, "rank 0 only: host the NATS server named by --nats in this process (its token or user:password are required of clients) and publish steps to it in-process; launch --nats-in-rank0 uses it")
	c.natsAuth.flags(fs)
	c.workerOpts.flags(fs)
	c.telemetryOpts.flags(fs)
	fs.StringVar(&c.Prefix, "subject-prefix", "tpc", "prefix of the job's NATS subjects")
	fs.IntVar(&c.ReplayWindow, "replay-window", 1024, "steps rank 0 keeps to replay to a follower that missed some")
	fs.IntVar(&c.ReplayWindowBytes, "replay-window-bytes", rank.DefaultReplayWindowBytes, "bytes of step messages rank 0 keeps for replay, besides --replay-window's count (oldest dropped first; the newest step is always kept)")
	fs.IntVar(&c.StepQueueBytes, "step-queue-bytes", rank.DefaultStepQueueBytes, "followers: bytes of received steps waiting to be applied; a step beyond this is dropped and recovered by replay (an empty queue takes any step)")
	fs.StringVar(&c.Executor, "executor", "synthetic", "model executor: synthetic (built-in load generator) or worker (a model worker process, see --worker-cmd)")
	fs.IntVar(&c.Vocab, "vocab", 100352, "vocabulary size")
	fs.IntVar(&c.EOS, "eos", 0, "end-of-sequence token ID (-1 for none)")
	fs.IntVar(&c.MaxBatch, "max-batch", 32, "most sequences decoded per step")
	fs.IntVar(&c.MaxBatchTokens, "max-batch-tokens", 0, "most prompt+output tokens across the batch's rows (0: no bound); the oldest waiting request is admitted first")
	fs.IntVar(&c.MaxQueue, "max-queue", 1024, "most requests waiting for a batch slot; more are refused as overloaded")
	fs.IntVar(&c.MaxLag, "max-lag", 2, "rank 0 publishes step k only when every follower has applied step k-1-max-lag")
	fs.DurationVar(&c.ForwardTime, "forward-time", 20*time.Millisecond, "synthetic executor: wall time of one forward pass")
	fs.DurationVar(&c.RendezvousTimeout, "rendezvous-timeout", 60*time.Second, "how long to wait for all ranks to join")
	fs.DurationVar(&c.HeartbeatInterval, "heartbeat-interval", 250*time.Millisecond, "interval of periodic heartbeats (every rank)")
	fs.DurationVar(&c.HeartbeatTimeout, "heartbeat-timeout", time.Second, "declare a rank lost after this long without its heartbeat (0: rely on membership alone)")
	fs.StringVar(&c.OnPeerLoss, "on-peer-loss", "fail", "when a rank is lost: fail (answer open requests with an error and exit 3) or wait (hold requests, re-form when the rank is back, resume in a new epoch)")
	fs.DurationVar(&c.RankClaimWait, "rank-claim-wait", 15*time.Second, "if another member holds this rank, keep trying this long (it may be a dead process not yet detected) before exiting with code 2")
	fs.DurationVar(&c.Gossip.ProbeInterval, "gossip-probe-interval", 0, "memberlist failure-detector probe interval (0: LAN default 1s, or the --local default)")
	fs.DurationVar(&c.Gossip.ProbeTimeout, "gossip-probe-timeout", 0, "memberlist probe timeout (0: LAN default 500ms, or the --local default)")
	fs.DurationVar(&c.Gossip.GossipInterval, "gossip-interval", 0, "memberlist gossip interval (0: LAN default 200ms, or the --local default)")
	fs.IntVar(&c.Gossip.SuspicionMult, "gossip-suspicion-mult", 0, "memberlist suspicion multiplier (0: LAN default 4, or the --local default)")
	fs.StringVar(&c.GossipKeyFile, "gossip-key-file", "", "file with a base64 16, 24 or 32-byte key: encrypts and authenticates memberlist gossip")
	np := noisepool.DefaultConfig()
	fs.StringVar(&c.Noise, "noise", "pool", "rank 0's Gumbel noise: pool (pre-generated by background producers), inline, or sync (benchmark baseline: every full noise row generated on the critical path)")
	fs.StringVar(&c.Sampling, "sampling", "logspace", "sampler: logspace (Gumbel-max in log space) or softmax (benchmark baseline: softmax with exponential noise, sampler.Reference)")
	fs.StringVar(&c.SamplingRanks, "sampling-ranks", "rank0", "ranks that sample: rank0, or all (benchmark baseline: every rank computes logits and samples, followers discard the tokens); all ranks must agree")
	fs.IntVar(&c.NoisePool.Rows, "noise-pool-rows", np.Rows, "noise pool: vocab-length rows it owns (memory: rows × vocab × 4 bytes); at least max-batch × (noise-lookahead + 1) to serve every row")
	fs.IntVar(&c.NoisePool.Producers, "noise-producers", np.Producers, "noise pool: background producer goroutines")
	fs.IntVar(&c.NoisePool.Lookahead, "noise-lookahead", np.Lookahead, "noise pool: rows prefetched per active stream")
	fs.Int64Var(&c.NoisePool.MaxBytes, "noise-max-bytes", np.MaxBytes, "noise pool: refuse configurations larger than this")
	fs.IntVar(&c.TraceEvery, "trace-every", 100, "trace every Nth step (0: none); spans go to the OpenTelemetry tracer provider")
	fs.StringVar(&c.LogLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&c.LogFormat, "log-format", "json", "log format: json or text")
}

// validate checks the config; errors name the flag.
func (c *agentConfig) validate() error {
	if err := broadcast.ValidateToken("job", c.Job); err != nil {
		return configError("%v", err)
	}
	if err := broadcast.ValidateToken("subject-prefix", c.Prefix); err != nil {
		return configError("%v", err)
	}
	switch {
	case c.WorldSize < 1 || c.WorldSize > maxWorldSize:
		return configError("world-size: must be in [1, %d], got %d", maxWorldSize, c.WorldSize)
	case c.Rank < 0 || c.Rank >= c.WorldSize:
		return configError("rank: must be in [0, %d) for world-size %d, got %d", c.WorldSize, c.WorldSize, c.Rank)
	case c.Executor != "synthetic" && c.Executor != "worker":
		return configError("executor: %q is not supported (supported: synthetic, worker)", c.Executor)
	case c.Vocab < 16 || c.Vocab > 1<<24:
		return configError("vocab: must be in [16, %d], got %d", 1<<24, c.Vocab)
	case c.EOS < -1 || c.EOS >= c.Vocab:
		return configError("eos: must be -1 or a token in [0, %d), got %d", c.Vocab, c.EOS)
	case c.MaxBatch < 1 || c.MaxBatch > broadcast.MaxAdmissions:
		return configError("max-batch: must be in [1, %d], got %d", broadcast.MaxAdmissions, c.MaxBatch)
	case c.MaxBatchTokens < 0:
		return configError("max-batch-tokens: must be >= 0, got %d", c.MaxBatchTokens)
	case c.MaxQueue < 1:
		return configError("max-queue: must be >= 1, got %d", c.MaxQueue)
	case c.MaxLag < 0 || c.MaxLag > 1000:
		return configError("max-lag: must be in [0, 1000], got %d", c.MaxLag)
	case c.ForwardTime < 0:
		return configError("forward-time: must be >= 0, got %v", c.ForwardTime)
	case c.RendezvousTimeout <= 0:
		return configError("rendezvous-timeout: must be > 0, got %v", c.RendezvousTimeout)
	case c.HeartbeatInterval <= 0:
		return configError("heartbeat-interval: must be > 0, got %v", c.HeartbeatInterval)
	case c.NATS == "":
		return configError("nats: must not be empty")
	case c.NATSServe && c.Rank != 0:
		return configError("nats-serve: only rank 0 hosts the NATS server; this is rank %d", c.Rank)
	case c.NATSServe && c.OnPeerLoss == "wait":
		return configError("nats-serve: not with --on-peer-loss wait: the bus would die with rank 0, and the followers could not re-form around a new one")
	case c.ReplayWindow < 1 || c.ReplayWindow > 1<<20:
		return configError("replay-window: must be in [1, %d], got %d", 1<<20, c.ReplayWindow)
	case c.ReplayWindowBytes < 1:
		return configError("replay-window-bytes: must be > 0, got %d", c.ReplayWindowBytes)
	case c.StepQueueBytes < 1:
		return configError("step-queue-bytes: must be > 0, got %d", c.StepQueueBytes)
	case c.HeartbeatTimeout < 0 || (c.HeartbeatTimeout > 0 && c.HeartbeatTimeout <= c.HeartbeatInterval):
		return configError("heartbeat-timeout: must be 0 or longer than heartbeat-interval (%v), got %v", c.HeartbeatInterval, c.HeartbeatTimeout)
	case c.OnPeerLoss != "fail" && c.OnPeerLoss != "wait":
		return configError("on-peer-loss: %q is not one of fail, wait", c.OnPeerLoss)
	case c.Noise != "pool" && c.Noise != "inline" && c.Noise != "sync":
		return configError("noise: %q is not one of pool, inline, sync", c.Noise)
	case c.Sampling != "logspace" && c.Sampling != "softmax":
		return configError("sampling: %q is not one of logspace, softmax", c.Sampling)
	case c.SamplingRanks != "rank0" && c.SamplingRanks != "all":
		return configError("sampling-ranks: %q is not one of rank0, all", c.SamplingRanks)
	case c.TraceEvery < 0:
		return configError("trace-every: must be >= 0, got %d", c.TraceEvery)
	}
	if err := c.telemetryOpts.validate(); err != nil {
		return err
	}
	if err := c.workerOpts.validate(c.Executor); err != nil {
		return err
	}
	if c.Noise == "pool" && c.samples() {
		c.NoisePool.Vocab = c.Vocab
		if err := c.NoisePool.Validate(); err != nil {
			return configError("%v", strings.TrimPrefix(err.Error(), "--"))
		}
	}
	if c.WorldSize > 1 && c.Rank != 0 && len(c.Join) == 0 {
		return configError("join: rank %d of a world of %d needs at least one peer to join", c.Rank, c.WorldSize)
	}
	return nil
}

// samples reports whether this rank runs a sampler: rank 0, or every rank
// with --sampling-ranks all.
func (c *agentConfig) samples() bool { return c.Rank == 0 || c.SamplingRanks == "all" }

// digest is the config digest that members must agree on.
func (c *agentConfig) digest() string {
	h := sha256.Sum256(fmt.Appendf(nil, "world=%d vocab=%d eos=%d executor=%s proto=%d prefix=%s on-peer-loss=%s sampling-ranks=%s", c.WorldSize, c.Vocab, c.EOS, c.Executor, wireVersion, c.Prefix, c.OnPeerLoss, c.SamplingRanks))
	return fmt.Sprintf("%x", h[:8])
}

func newAgentCmd() *cobra.Command {
	var cfg agentConfig
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run one TP rank: join the cluster, wait for all ranks, run the decode loop",
		Long: `Run one TP rank. The agent joins the memberlist cluster, waits until ranks
0..world-size-1 are present, connects to NATS and runs the decode loop in
lockstep with the other ranks. Rank 0 takes generate requests, samples and
publishes one step message per step.

Exit codes: 0 stopped cleanly, 1 runtime error, 2 configuration error,
3 a peer rank was lost, 4 aborted (lockstep could not be kept).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := layerConfig(cmd.Flags()); err != nil {
				return err
			}
			if err := cfg.validate(); err != nil {
				return err
			}
			log, err := newLogger(cmd.ErrOrStderr(), cfg.LogLevel, cfg.LogFormat)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runAgent(ctx, stop, cfg, log)
		},
	}
	cfg.flags(cmd.Flags())
	return cmd
}

// runAgent is the agent's life: connect, rendezvous, decode, leave. stop
// restores default signal handling, so a second signal kills the process.
func runAgent(ctx context.Context, stop func(), cfg agentConfig, log *slog.Logger) error {
	log = log.With("job", cfg.Job, "rank", cfg.Rank)
	log.Info("agent starting", "version", version, "world_size", cfg.WorldSize, "bind", cfg.Bind, "join", cfg.Join, "nats", natsbus.Redact(cfg.NATS))
	// systemd (Type=notify, WatchdogSec=): no-ops outside a unit.
	sd := newNotifier(os.Getenv, os.Getpid(), log)
	stopWatchdog := sd.startWatchdog()
	defer stopWatchdog()
	tel, err := startTelemetry(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer tel.Close()

	natsClosed := make(chan struct{})
	var closeOnce sync.Once
	// With --nats-serve rank 0 hosts the server and reaches it in-process.
	ncfg := natsbus.Config{URL: cfg.NATS, Name: fmt.Sprintf("tpcoord-%s-r%d", cfg.Job, cfg.Rank), Logger: log,
		OnClosed: func() { closeOnce.Do(func() { close(natsClosed) }) }}
	cfg.natsAuth.apply(&ncfg)
	if cfg.NATSServe {
		bus, err := natsbus.Serve(cfg.NATS)
		if err != nil {
			return err
		}
		defer bus.Close() // after nc.Close (defers run last-in first-out)
		ncfg.InProcess = bus
		log.Info("NATS server started in this process", "url", natsbus.Redact(bus.URL()))
	}
	nc, err := natsbus.ConnectWait(ctx, ncfg, cfg.RendezvousTimeout)
	if err != nil {
		if ctx.Err() != nil {
			log.Info("stopped before NATS was reachable")
			return nil
		}
		return err
	}
	defer nc.Close()
	// Rank 0 publishes its steps on a connection of their own that writes
	// each one out in the publishing goroutine (no wake-up of nats.go's
	// flusher on the way); client replies and heartbeats stay batched on
	// the main one. Heartbeats may then overtake a step; followers only
	// act on a rank 0 heartbeat a whole interval old.
	var steps *natsbus.Conn
	if cfg.Rank == 0 {
		scfg := ncfg
		scfg.Name, scfg.WriteThrough = ncfg.Name+"-steps", true // OnClosed shared: either closing for good ends the agent
		if steps, err = natsbus.Connect(scfg); err != nil {
			return err
		}
		defer steps.Close()
	}

	ex, err := newExecutor(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer ex.Close()

	var leader uint32
	if cfg.Rank == 0 {
		if leader, err = newLeaderID(); err != nil {
			return err
		}
	}
	gossipKey, err := readGossipKey(cfg.GossipKeyFile)
	if err != nil {
		return err
	}
	cl, err := membership.Start(membership.Config{
		GossipKey: gossipKey, ClaimWait: cfg.RankClaimWait,
		ProbeInterval: cfg.Gossip.ProbeInterval, ProbeTimeout: cfg.Gossip.ProbeTimeout,
		GossipInterval: cfg.Gossip.GossipInterval, SuspicionMult: cfg.Gossip.SuspicionMult,
		Meta: membership.Meta{Job: cfg.Job, Rank: cfg.Rank, World: cfg.WorldSize, Digest: cfg.digest(), NATS: natsbus.Redact(cfg.NATS), Version: version, Proto: wireVersion, Leader: leader},
		Bind: cfg.Bind, Join: cfg.Join, Local: cfg.Local, Logger: log,
	})
	if err != nil {
		return err
	}
	// A clean stop leaves the cluster announcing it (peers stop cleanly
	// too); an agent that fails leaves without the announcement, so peers
	// see a lost rank and apply --on-peer-loss.
	cleanExit := false
	defer func() {
		leave := cl.Abandon
		if cleanExit {
			leave = cl.Leave
		}
		if err := leave(time.Second); err != nil {
			log.Debug("leave", "err", err)
		}
	}()
	log.Info("membership started", "member", cl.Name(), "addr", cl.Addr())

	rctx, cancel := context.WithTimeout(ctx, cfg.RendezvousTimeout)
	members, err := cl.Rendezvous(rctx)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			log.Info("stopped before rendezvous completed")
			return nil
		}
		if errors.Is(err, membership.ErrRankTaken) {
			return configError("%v", err)
		}
		return err
	}
	sd.notify(fmt.Sprintf("READY=1\nSTATUS=rendezvous complete: %d ranks of job %s", cfg.WorldSize, cfg.Job))
	defer sd.notify("STOPPING=1")

	base, err := noisepool.NewBase(rand.Reader)
	if err != nil {
		return err
	}
	var pool *noisepool.Pool
	if cfg.Noise == "pool" && cfg.samples() {
		if pool, err = noisepool.New(cfg.NoisePool); err != nil {
			return configError("%v", err)
		}
		defer pool.Close()
		log.Info("noise pool started", "rows", cfg.NoisePool.Rows, "producers", cfg.NoisePool.Producers, "mib", cfg.NoisePool.Bytes()>>20)
	}
	noise := map[string]rank.NoiseMode{"inline": rank.NoiseInline, "pool": rank.NoisePool, "sync": rank.NoiseSync}[cfg.Noise]
	if noise == rank.NoisePool && pool == nil {
		noise = rank.NoiseInline // a follower that does not sample
	}
	picker := rank.NewSamplingWith(rank.SamplingConfig{
		Vocab: cfg.Vocab, EOS: int32(cfg.EOS), Base: base, Noise: noise, Pool: pool, Softmax: cfg.Sampling == "softmax",
	})
	dcfg := rank.DriverConfig{
		Job: cfg.Job, Prefix: cfg.Prefix, Rank: cfg.Rank, World: cfg.WorldSize,
		MaxBatch: cfg.MaxBatch, MaxQueue: cfg.MaxQueue, MaxLag: cfg.MaxLag, MaxBatchTokens: cfg.MaxBatchTokens,
		Heartbeat: cfg.HeartbeatInterval, HeartbeatTimeout: cfg.HeartbeatTimeout,
		EOS: int32(cfg.EOS), Version: version, Logger: log,
		ReplayWindow: cfg.ReplayWindow, MaxStepBytes: nc.MaxPayload(),
		ReplayWindowBytes: cfg.ReplayWindowBytes, StepQueueBytes: cfg.StepQueueBytes,
		Tracer: otel.Tracer("github.com/tpcoord/tpcoord"), TraceEvery: cfg.TraceEvery,
		Flight: tel.flight, Metrics: tel.metrics,
		HoldOnPeerLoss: cfg.OnPeerLoss == "wait",
	}
	if steps != nil {
		dcfg.Steps = steps
	}
	if cfg.Rank != 0 && cfg.SamplingRanks == "all" {
		dcfg.FollowerPick = picker
	}
	w := &world{cfg: cfg, log: log, cl: cl, natsClosed: natsClosed}
	if err := w.adopt(members); err != nil {
		return err
	}
	for {
		dcfg.Epoch, dcfg.Leader = w.epoch, w.leader
		d := rank.NewDriver(dcfg, nc, ex, picker)
		err, peerLeft := w.run(ctx, d)
		tel.runEnded(err)
		var moved *rank.EpochMovedError
		if cfg.OnPeerLoss == "wait" && errors.As(err, &moved) {
			// Rank 0 re-formed the world with this rank in it: follow it.
			log.Warn("rank 0 leads a later epoch; following it", "epoch", moved.Epoch, "was", moved.Was)
			w.epoch = moved.Epoch
			continue
		}
		if err == nil || !errors.Is(err, rank.ErrPeerLost) || cfg.OnPeerLoss == "fail" {
			stop()
			cleanExit = err == nil
			return exitFor(err, peerLeft, log)
		}
		// --on-peer-loss wait: keep rank 0's open requests, wait for the
		// world to re-form, and go on in a new epoch.
		dcfg.Resume = d.InFlight()
		log.Warn("peer lost; waiting for the world to re-form", "err", err, "requests_held", len(dcfg.Resume))
		sd.notify("STATUS=waiting for the world to re-form after: " + err.Error())
		// Meanwhile status requests, and rank 0's clients, still get answers.
		hold, err := rank.NewHold(nc, broadcast.Subjects{Prefix: cfg.Prefix, Job: cfg.Job}, d.Status(), dcfg.Resume)
		if err != nil {
			return fmt.Errorf("answer for the rank while the world re-forms: %w", err)
		}
		if err := w.reform(ctx); err != nil {
			if ctx.Err() != nil {
				hold.Fail(errors.New("rank 0 is shutting down"))
				return nil
			}
			hold.Fail(fmt.Errorf("the world did not re-form: %w", err))
			return err
		}
		dcfg.Resume = hold.Close()
		sd.notify(fmt.Sprintf("STATUS=world re-formed: epoch %d", w.epoch))
	}
}

// world is an agent's view of the job's membership across epochs.
type world struct {
	cfg        agentConfig
	log        *slog.Logger
	cl         *membership.Cluster
	natsClosed chan struct{}
	leader     uint32 // rank 0's publisher ID
	epoch      uint32 // rank 0's epoch
}

// adopt takes rank 0's leader ID and epoch from the formed world.
func (w *world) adopt(members []membership.Member) error {
	for _, m := range members {
		if m.Meta.Rank == 0 {
			w.leader, w.epoch = m.Meta.Leader, m.Meta.Epoch
		}
	}
	if w.leader == 0 {
		return fmt.Errorf("rank 0 of job %s advertises no leader ID (is it an older tpcoord?)", w.cfg.Job)
	}
	return nil
}

// rank0Changed reports whether rank 0 now advertises another leader or
// epoch than the one this agent runs.
func (w *world) rank0Changed(members []membership.Member) bool {
	for _, m := range members {
		if m.Meta.Rank == 0 {
			return m.Meta.Leader != w.leader || m.Meta.Epoch != w.epoch
		}
	}
	return false
}

// reform waits until every rank is back. Rank 0 then starts the next
// epoch and advertises it; followers wait for rank 0's new epoch (or a
// new rank 0) and adopt it.
func (w *world) reform(ctx context.Context) error {
	var cond func([]membership.Member) bool
	if w.cfg.Rank != 0 {
		cond = w.rank0Changed
	}
	members, err := w.cl.Reform(ctx, cond)
	if err != nil {
		return err
	}
	if w.cfg.Rank == 0 {
		w.epoch++
		if err := w.cl.UpdateMeta(func(m *membership.Meta) { m.Epoch = w.epoch }, 5*time.Second); err != nil {
			w.log.Warn("epoch announcement not confirmed by every member", "epoch", w.epoch, "err", err)
		}
		w.log.Info("world re-formed", "epoch", w.epoch)
		return nil
	}
	if err := w.adopt(members); err != nil {
		return err
	}
	w.log.Info("world re-formed", "epoch", w.epoch, "leader", fmt.Sprintf("%08x", w.leader))
	return nil
}

// run runs one epoch's decode loop and turns membership events into its
// stop: a failed peer aborts it with ErrPeerLost, a peer that left on
// purpose stops it cleanly (peerLeft), and on a follower a change of rank
// 0's epoch or leader ends it as a peer loss, so it re-forms.
func (w *world) run(ctx context.Context, d *rank.Driver) (err error, peerLeft bool) {
	// Events from before this world formed were dropped when it formed
	// (coordinator); those since are about this epoch's peers.
	dctx, dcancel := context.WithCancel(ctx)
	defer dcancel()
	done := make(chan error, 1)
	go func() { done <- d.Run(dctx) }()
	changes := w.cl.Changes()
	for {
		select {
		case ev := <-w.cl.Events():
			if ev.Left {
				// A peer shut down on purpose: the job is being stopped.
				w.log.Info("peer left the job; stopping", "peer", ev.String())
				peerLeft = true
				dcancel()
				continue
			}
			w.log.Error("peer lost; stopping the decode loop", "peer", ev.String())
			d.Abort(fmt.Errorf("%w: %s", rank.ErrPeerLost, ev))
		case <-changes:
			if w.cfg.Rank != 0 && w.rank0Changed(w.cl.Members()) {
				w.log.Warn("rank 0 moved to another epoch or was replaced; re-forming")
				d.Abort(fmt.Errorf("%w: rank 0 changed epoch or leader", rank.ErrPeerLost))
			}
		case <-w.natsClosed:
			w.natsClosed = nil
			w.log.Error("NATS connection closed for good; stopping the decode loop")
			d.Abort(fmt.Errorf("%w: rank %d lost its NATS connection (reconnects exhausted)", rank.ErrAborted, w.cfg.Rank))
		case err := <-done:
			return err, peerLeft
		}
	}
}

func exitFor(err error, peerLeft bool, log *slog.Logger) error {
	switch {
	case err == nil:
		if !peerLeft {
			log.Info("agent stopped")
		}
		return nil
	case errors.Is(err, rank.ErrPeerLost):
		return &exitError{code: exitPeerLost, err: err}
	case errors.Is(err, rank.ErrAborted):
		return &exitError{code: exitAborted, err: err}
	}
	return err
}

// gossipTuning overrides memberlist's failure-detector timings.
type gossipTuning struct {
	ProbeInterval, ProbeTimeout, GossipInterval time.Duration
	SuspicionMult                               int
}

// readGossipKey reads a base64 memberlist key; "" means no encryption.
func readGossipKey(path string) ([]byte, error) {
	if path == "" {
		return nil, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, configError("gossip-key-file: %v", err)
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(data)))
	if err != nil {
		return nil, configError("gossip-key-file: %s is not base64: %v", path, err)
	}
	if n := len(key); n != 16 && n != 24 && n != 32 {
		return nil, configError("gossip-key-file: %s holds a %d-byte key, want 16, 24 or 32 bytes", path, n)
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

// agentArgs renders the flags of fs that were set (by flag, env or file)
// as command-line arguments, skipping the names in skip.
func agentArgs(fs *pflag.FlagSet, skip ...string) []string {
	var args []string
	fs.VisitAll(func(f *pflag.Flag) {
		for _, s := range skip {
			if f.Name == s {
				return
			}
		}
		if !f.Changed && f.Value.String() == f.DefValue {
			return
		}
		v := f.Value.String()
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			v = strings.Join(sv.GetSlice(), ",")
		}
		args = append(args, fmt.Sprintf("--%s=%s", f.Name, v))
	})
	return args
}
