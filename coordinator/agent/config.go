package agent

import (
	"crypto/sha256"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/broadcast/natsbus"
	"github.com/tpcoord/tpcoord/coordinator/membership"
	"github.com/tpcoord/tpcoord/internal/fielderr"
	"github.com/tpcoord/tpcoord/internal/telemetry"
	"github.com/tpcoord/tpcoord/noisepool"
	"github.com/tpcoord/tpcoord/rank"
	"github.com/tpcoord/tpcoord/rank/worker"
)

// MaxWorldSize bounds WorldSize (and what status believes of replies).
const MaxWorldSize = 1024

// Config is everything one rank needs. DefaultConfig is the one place its
// defaults are written; Validate's errors name the field (*fielderr.Error).
type Config struct {
	Job       string   // names the NATS subjects and the memberlist label
	Rank      int      // this agent's TP rank; rank 0 schedules and samples
	WorldSize int      // TP ranks in the job
	Bind      string   // memberlist host:port (port 0: a free one); beyond loopback it needs GossipKeyFile or Insecure
	Join      []string // memberlist peers to join
	Local     bool     // memberlist's fast loopback timings

	NATS      string // NATS server URL
	NATSServe bool   // rank 0 hosts the server named by NATS
	// NATSServeClients (with NATSServe) is the URL of the clients' user and
	// password: the hosted server then gives clients only what they need.
	NATSServeClients string
	NATSAuth         natsbus.Auth // credentials and TLS beyond the URL's
	Prefix           string       // prefix of the job's NATS subjects

	Executor    string        // "synthetic" or "worker"
	Worker      WorkerConfig  // Executor "worker"
	ForwardTime time.Duration // Executor "synthetic": wall time of a forward pass

	Vocab          int
	EOS            int // end-of-sequence token, -1 for none
	MaxBatch       int
	MaxBatchTokens int // prompt+output tokens across the batch (0: no bound)
	MaxQueue       int
	MaxLag         int // steps rank 0 may run ahead of the slowest follower

	RendezvousTimeout time.Duration
	HeartbeatInterval time.Duration
	HeartbeatTimeout  time.Duration // 0: rely on membership alone
	OnPeerLoss        string        // "fail" or "wait"
	// GossipKeyFile holds the gossip keyring (membership.ReadKeyring: one
	// base64 key per line, the first encrypts), readable by its owner only.
	// Empty: gossip in the clear, which Validate refuses beyond loopback
	// unless Insecure is set.
	GossipKeyFile string
	// JobKeyFile holds the job's message key in base64 (32 bytes; see
	// broadcast.ReadKeyFile): every step, heartbeat and replay message is
	// sealed and checked with it. Empty: the job has no key. Every rank
	// of a job must agree on whether there is one (it is in the digest)
	// and hold the same key.
	JobKeyFile    string
	RankClaimWait time.Duration
	Gossip        GossipTuning
	// Insecure accepts Exposures: memberlist beyond loopback without a
	// gossip key, NATS servers beyond loopback without credentials. Run
	// logs what is exposed once, as a warning.
	Insecure bool

	ReplayWindow      int
	ReplayWindowBytes int
	StepQueueBytes    int

	Noise         string // "pool", "inline" or "sync" (a benchmark baseline)
	Sampling      string // "logspace" or "softmax" (a benchmark baseline)
	SamplingRanks string // "rank0" or "all" (a benchmark baseline)
	NoisePool     noisepool.Config

	TraceEvery int // trace every Nth step (0: none)
	Telemetry  telemetry.Config
}

// WorkerConfig selects a model worker process (docs/worker-protocol.md).
type WorkerConfig struct {
	Cmd            string // command line the agent starts ({socket}, {rank} replaced)
	Socket         string // or: a running worker's socket ({rank} replaced)
	DType          string // logits type: float32, float16, bfloat16
	ForwardTimeout time.Duration
}

// GossipTuning overrides memberlist's failure-detector timings; zero keeps
// the LAN (or Local) default.
type GossipTuning struct {
	ProbeInterval, ProbeTimeout, GossipInterval time.Duration
	SuspicionMult                               int
}

// DefaultConfig is a one-rank job on this host with the synthetic
// executor, the settings of a card at batch 32 and vocab 100352.
func DefaultConfig() Config {
	return Config{
		Job: "default", WorldSize: 1, Bind: "127.0.0.1:7946",
		NATS: "nats://127.0.0.1:4222", Prefix: "tpc",
		Executor: "synthetic", ForwardTime: 20 * time.Millisecond,
		Worker: WorkerConfig{DType: "float32", ForwardTimeout: worker.DefaultForwardTimeout},
		Vocab:  100352, EOS: 0, MaxBatch: 32, MaxQueue: 1024, MaxLag: 2,
		RendezvousTimeout: 60 * time.Second, HeartbeatInterval: rank.DefaultHeartbeat, HeartbeatTimeout: time.Second,
		OnPeerLoss: "fail", RankClaimWait: membership.DefaultClaimWait,
		ReplayWindow: rank.DefaultReplayWindow, ReplayWindowBytes: rank.DefaultReplayWindowBytes, StepQueueBytes: rank.DefaultStepQueueBytes,
		Noise: "pool", Sampling: "logspace", SamplingRanks: "rank0",
		NoisePool:  noisepool.DefaultConfig(),
		TraceEvery: 100,
		Telemetry:  telemetry.Config{FlightSteps: rank.DefaultFlightSteps},
	}
}

// Samples reports whether this rank runs a sampler: rank 0, or every rank
// with SamplingRanks "all".
func (c *Config) Samples() bool { return c.Rank == 0 || c.SamplingRanks == "all" }

// Digest is the configuration digest that every member of a job must
// share: what must agree for lockstep to hold, and whether the job has a
// key (a rank with one refuses every message of a rank without; the key
// itself is not in it).
func (c *Config) Digest() string {
	h := sha256.Sum256(fmt.Appendf(nil, "world=%d vocab=%d eos=%d executor=%s proto=%d prefix=%s on-peer-loss=%s sampling-ranks=%s job-key=%t",
		c.WorldSize, c.Vocab, c.EOS, c.Executor, broadcast.Version, c.Prefix, c.OnPeerLoss, c.SamplingRanks, c.JobKeyFile != ""))
	return fmt.Sprintf("%x", h[:8])
}

// Validate reports the first invalid field. It also sets NoisePool.Vocab
// to Vocab and NoisePool.Batch to MaxBatch.
func (c *Config) Validate() error {
	for _, check := range []func() error{c.validateIdentity, c.validateExposure, c.validateModel, c.validateTiming, c.validateBuffers, c.validateModes} {
		if err := check(); err != nil {
			return err
		}
	}
	if err := c.Telemetry.Validate(); err != nil {
		return fielderr.Within("Telemetry", err)
	}
	if err := c.Worker.validate(c.Executor); err != nil {
		return fielderr.Within("Worker", err)
	}
	if c.Noise == "pool" && c.Samples() {
		c.NoisePool.Vocab, c.NoisePool.Batch = c.Vocab, c.MaxBatch
		if err := c.NoisePool.Validate(); err != nil {
			return fielderr.Within("NoisePool", err)
		}
	}
	return nil
}

func (c *Config) validateIdentity() error {
	if err := broadcast.ValidateToken("Job", c.Job); err != nil {
		return err
	}
	if err := broadcast.ValidateToken("Prefix", c.Prefix); err != nil {
		return err
	}
	switch {
	case c.WorldSize < 1 || c.WorldSize > MaxWorldSize:
		return fielderr.New("WorldSize", "must be in [1, %d], got %d", MaxWorldSize, c.WorldSize)
	case c.Rank < 0 || c.Rank >= c.WorldSize:
		return fielderr.New("Rank", "must be in [0, %d) for world size %d, got %d", c.WorldSize, c.WorldSize, c.Rank)
	case c.WorldSize > 1 && c.Rank != 0 && len(c.Join) == 0:
		return fielderr.New("Join", "rank %d of a world of %d needs at least one peer to join", c.Rank, c.WorldSize)
	case c.NATS == "":
		return fielderr.New("NATS", "must not be empty")
	case c.NATSServeClients != "" && !c.NATSServe:
		return fielderr.New("NATSServeClients", "only for a rank 0 that hosts the server (NATSServe)")
	case c.NATSServe && !natsbus.HasServer:
		return fielderr.New("NATSServe", "this build (tpcoord-agent) has no NATS server; run tpcoord agent to host it")
	case c.NATSServe && c.Rank != 0:
		return fielderr.New("NATSServe", "only rank 0 hosts the NATS server; this is rank %d", c.Rank)
	case c.NATSServe && c.OnPeerLoss == "wait":
		return fielderr.New("NATSServe", "not with on-peer-loss wait: the bus would die with rank 0, and the followers could not re-form around a new one")
	}
	return nil
}

func (c *Config) validateModel() error {
	switch {
	case c.Executor != "synthetic" && c.Executor != "worker":
		return fielderr.New("Executor", "%q is not supported (supported: synthetic, worker)", c.Executor)
	case c.Vocab < 16 || c.Vocab > 1<<24:
		return fielderr.New("Vocab", "must be in [16, %d], got %d", 1<<24, c.Vocab)
	case c.EOS < -1 || c.EOS >= c.Vocab:
		return fielderr.New("EOS", "must be -1 or a token in [0, %d), got %d", c.Vocab, c.EOS)
	case c.MaxBatch < 1 || c.MaxBatch > broadcast.MaxAdmissions:
		return fielderr.New("MaxBatch", "must be in [1, %d], got %d", broadcast.MaxAdmissions, c.MaxBatch)
	case c.MaxBatchTokens < 0:
		return fielderr.New("MaxBatchTokens", "must be >= 0, got %d", c.MaxBatchTokens)
	case c.MaxQueue < 1:
		return fielderr.New("MaxQueue", "must be >= 1, got %d", c.MaxQueue)
	case c.MaxLag < 0 || c.MaxLag > 1000:
		return fielderr.New("MaxLag", "must be in [0, 1000], got %d", c.MaxLag)
	case c.ForwardTime < 0:
		return fielderr.New("ForwardTime", "must be >= 0, got %v", c.ForwardTime)
	}
	return nil
}

func (c *Config) validateTiming() error {
	switch {
	case c.RendezvousTimeout <= 0:
		return fielderr.New("RendezvousTimeout", "must be > 0, got %v", c.RendezvousTimeout)
	case c.HeartbeatInterval <= 0:
		return fielderr.New("HeartbeatInterval", "must be > 0, got %v", c.HeartbeatInterval)
	case c.HeartbeatTimeout < 0 || (c.HeartbeatTimeout > 0 && c.HeartbeatTimeout <= c.HeartbeatInterval):
		return fielderr.New("HeartbeatTimeout", "must be 0 or longer than the heartbeat interval (%v), got %v", c.HeartbeatInterval, c.HeartbeatTimeout)
	case c.RankClaimWait < 0:
		return fielderr.New("RankClaimWait", "must be >= 0, got %v", c.RankClaimWait)
	case c.TraceEvery < 0:
		return fielderr.New("TraceEvery", "must be >= 0, got %d", c.TraceEvery)
	}
	return nil
}

func (c *Config) validateBuffers() error {
	switch {
	case c.ReplayWindow < 1 || c.ReplayWindow > 1<<20:
		return fielderr.New("ReplayWindow", "must be in [1, %d], got %d", 1<<20, c.ReplayWindow)
	case c.ReplayWindowBytes < 1:
		return fielderr.New("ReplayWindowBytes", "must be > 0, got %d", c.ReplayWindowBytes)
	case c.StepQueueBytes < 1:
		return fielderr.New("StepQueueBytes", "must be > 0, got %d", c.StepQueueBytes)
	}
	return nil
}

func (c *Config) validateModes() error {
	for _, m := range []struct {
		field, value string
		allowed      []string
	}{
		{"OnPeerLoss", c.OnPeerLoss, []string{"fail", "wait"}},
		{"Noise", c.Noise, []string{"pool", "inline", "sync"}},
		{"Sampling", c.Sampling, []string{"logspace", "softmax"}},
		{"SamplingRanks", c.SamplingRanks, []string{"rank0", "all"}},
	} {
		if !slices.Contains(m.allowed, m.value) {
			return fielderr.New(m.field, "%q is not one of %s", m.value, strings.Join(m.allowed, ", "))
		}
	}
	return nil
}
