package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
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

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/broadcast/natsbus"
	"github.com/tpcoord/tpcoord/coordinator"
	"github.com/tpcoord/tpcoord/noisepool"
	"github.com/tpcoord/tpcoord/rank"
)

const wireVersion = broadcast.Version

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
	natsAuth
	Prefix            string
	Executor          string
	Vocab             int
	EOS               int
	MaxBatch          int
	MaxQueue          int
	MaxLag            int
	ForwardTime       time.Duration
	RendezvousTimeout time.Duration
	HeartbeatInterval time.Duration
	ReplayWindow      int
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
	c.natsAuth.flags(fs)
	fs.StringVar(&c.Prefix, "subject-prefix", "tpc", "prefix of the job's NATS subjects")
	fs.IntVar(&c.ReplayWindow, "replay-window", 1024, "steps rank 0 keeps to replay to a follower that missed some")
	fs.StringVar(&c.Executor, "executor", "synthetic", "model executor: synthetic")
	fs.IntVar(&c.Vocab, "vocab", 100352, "vocabulary size")
	fs.IntVar(&c.EOS, "eos", 0, "end-of-sequence token ID (-1 for none)")
	fs.IntVar(&c.MaxBatch, "max-batch", 32, "most sequences decoded per step")
	fs.IntVar(&c.MaxQueue, "max-queue", 1024, "most requests waiting for a batch slot; more are refused as overloaded")
	fs.IntVar(&c.MaxLag, "max-lag", 2, "rank 0 publishes step k only when every follower has applied step k-1-max-lag")
	fs.DurationVar(&c.ForwardTime, "forward-time", 20*time.Millisecond, "synthetic executor: wall time of one forward pass")
	fs.DurationVar(&c.RendezvousTimeout, "rendezvous-timeout", 60*time.Second, "how long to wait for all ranks to join")
	fs.DurationVar(&c.HeartbeatInterval, "heartbeat-interval", 250*time.Millisecond, "interval of periodic heartbeats to rank 0")
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
	case c.WorldSize < 1 || c.WorldSize > 1024:
		return configError("world-size: must be in [1, 1024], got %d", c.WorldSize)
	case c.Rank < 0 || c.Rank >= c.WorldSize:
		return configError("rank: must be in [0, %d) for world-size %d, got %d", c.WorldSize, c.WorldSize, c.Rank)
	case c.Executor != "synthetic":
		return configError("executor: %q is not supported (supported: synthetic)", c.Executor)
	case c.Vocab < 16 || c.Vocab > 1<<24:
		return configError("vocab: must be in [16, %d], got %d", 1<<24, c.Vocab)
	case c.EOS < -1 || c.EOS >= c.Vocab:
		return configError("eos: must be -1 or a token in [0, %d), got %d", c.Vocab, c.EOS)
	case c.MaxBatch < 1 || c.MaxBatch > broadcast.MaxAdmissions:
		return configError("max-batch: must be in [1, %d], got %d", broadcast.MaxAdmissions, c.MaxBatch)
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
	case c.ReplayWindow < 1 || c.ReplayWindow > 1<<20:
		return configError("replay-window: must be in [1, %d], got %d", 1<<20, c.ReplayWindow)
	}
	if c.WorldSize > 1 && c.Rank != 0 && len(c.Join) == 0 {
		return configError("join: rank %d of a world of %d needs at least one peer to join", c.Rank, c.WorldSize)
	}
	return nil
}

// digest is the config digest that members must agree on.
func (c *agentConfig) digest() string {
	h := sha256.Sum256(fmt.Appendf(nil, "world=%d vocab=%d eos=%d executor=%s proto=%d prefix=%s", c.WorldSize, c.Vocab, c.EOS, c.Executor, wireVersion, c.Prefix))
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

	natsClosed := make(chan struct{})
	var closeOnce sync.Once
	ncfg := natsbus.Config{URL: cfg.NATS, Name: fmt.Sprintf("tpcoord-%s-r%d", cfg.Job, cfg.Rank), Logger: log,
		OnClosed: func() { closeOnce.Do(func() { close(natsClosed) }) }}
	cfg.natsAuth.apply(&ncfg)
	nc, err := natsbus.Connect(ncfg)
	if err != nil {
		return err
	}
	defer nc.Close()

	ex, err := rank.NewSynthetic(rank.SyntheticConfig{Vocab: cfg.Vocab, EOS: int32(cfg.EOS), ForwardTime: cfg.ForwardTime, Logits: cfg.Rank == 0})
	if err != nil {
		return configError("%v", err)
	}
	defer ex.Close()

	cl, err := coordinator.Start(coordinator.Config{
		Meta: coordinator.Meta{Job: cfg.Job, Rank: cfg.Rank, World: cfg.WorldSize, Digest: cfg.digest(), NATS: natsbus.Redact(cfg.NATS), Version: version},
		Bind: cfg.Bind, Join: cfg.Join, Local: cfg.Local, Logger: log,
	})
	if err != nil {
		return err
	}
	defer func() {
		if err := cl.Leave(time.Second); err != nil {
			log.Debug("leave", "err", err)
		}
	}()
	log.Info("membership started", "member", cl.Name(), "addr", cl.Addr())

	rctx, cancel := context.WithTimeout(ctx, cfg.RendezvousTimeout)
	_, err = cl.Rendezvous(rctx)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			log.Info("stopped before rendezvous completed")
			return nil
		}
		if errors.Is(err, coordinator.ErrRankTaken) {
			return configError("%v", err)
		}
		return err
	}

	base, err := noisepool.NewBase(rand.Reader)
	if err != nil {
		return err
	}
	picker := rank.NewSampling(cfg.Vocab, int32(cfg.EOS), base)
	d := rank.NewDriver(rank.DriverConfig{
		Job: cfg.Job, Prefix: cfg.Prefix, Rank: cfg.Rank, World: cfg.WorldSize,
		MaxBatch: cfg.MaxBatch, MaxQueue: cfg.MaxQueue, MaxLag: cfg.MaxLag,
		Heartbeat: cfg.HeartbeatInterval, EOS: int32(cfg.EOS), Version: version, Logger: log,
		ReplayWindow: cfg.ReplayWindow, MaxStepBytes: nc.MaxPayload(),
	}, nc, ex, picker)

	dctx, dcancel := context.WithCancel(ctx)
	defer dcancel()
	done := make(chan error, 1)
	go func() { done <- d.Run(dctx) }()

	var peerLeft bool
	for {
		select {
		case ev := <-cl.Events():
			if ev.Left {
				// A peer shut down on purpose: the job is being stopped.
				log.Info("peer left the job; stopping", "peer", ev.String())
				peerLeft = true
				dcancel()
				continue
			}
			log.Error("peer lost; stopping the decode loop", "peer", ev.String())
			d.Abort(fmt.Errorf("%w: %s", rank.ErrPeerLost, ev))
		case <-natsClosed:
			natsClosed = nil
			log.Error("NATS connection closed for good; stopping the decode loop")
			d.Abort(fmt.Errorf("%w: rank %d lost its NATS connection (reconnects exhausted)", rank.ErrAborted, cfg.Rank))
		case err := <-done:
			stop()
			return exitFor(err, peerLeft, log)
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
