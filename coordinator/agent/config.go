package agent

import (
	"crypto/sha256"
	"fmt"
	"time"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/broadcast/natsbus"
	"github.com/tpcoord/tpcoord/coordinator/membership"
	"github.com/tpcoord/tpcoord/internal/fielderr"
	"github.com/tpcoord/tpcoord/internal/telemetry"
	"github.com/tpcoord/tpcoord/noisepool"
	"github.com/tpcoord/tpcoord/rank"
	"github.com/tpcoord/tpcoord/rank/core"
	"github.com/tpcoord/tpcoord/rank/worker"
)

// MaxWorldSize bounds WorldSize (and what status believes of replies).
const MaxWorldSize = 1024

// Config is everything one rank needs. DefaultConfig is the one place its
// defaults are written (those the decode loop shares with rank.DriverConfig
// come from rank's Default* constants); Validate's errors name the field
// (*fielderr.Error). Each field's comment gives its default.
type Config struct {
	// Job names the job: its NATS subjects and its memberlist label.
	// Default "default".
	Job string
	// Rank is this agent's TP rank in [0, WorldSize); rank 0 schedules and
	// samples. Default 0.
	Rank int
	// WorldSize is the number of TP ranks in the job, at most
	// MaxWorldSize. Default 1.
	WorldSize int
	// Bind is the memberlist host:port (port 0: a free one); beyond
	// loopback it needs GossipKeyFile or Insecure. Default 127.0.0.1:7946.
	Bind string
	// Join are memberlist peers (host:port) to join; a rank other than 0
	// of a world of more than one needs at least one. Default none.
	Join []string
	// Local selects memberlist's fast loopback timings (every rank on
	// this host) instead of its LAN ones. Default false.
	Local bool

	// NATS is the NATS server's URL. Default nats://127.0.0.1:4222.
	NATS string
	// NATSServe has rank 0 host the server named by NATS in-process (not
	// with OnPeerLossWait). Default false.
	NATSServe bool
	// NATSServeClients (with NATSServe) is the URL of the clients' user and
	// password: the hosted server then gives clients only what they need.
	// Default none.
	NATSServeClients string
	// NATSAuth are the credentials and TLS beyond the URL's. Default none.
	NATSAuth natsbus.Auth
	// Prefix is the prefix of the job's NATS subjects. Default "tpc".
	Prefix string

	// Executor runs the forward passes: ExecutorSynthetic (default) or
	// ExecutorWorker.
	Executor Executor
	// Worker is the model worker of ExecutorWorker.
	Worker WorkerConfig
	// ForwardTime is the wall time of one forward pass of
	// ExecutorSynthetic. Default 20ms.
	ForwardTime time.Duration

	// Vocab is the vocabulary size, in [16, 2^24]. Default 100352.
	Vocab int
	// EOS is the end-of-sequence token, -1 for none. Default 0.
	EOS int
	// Tokenizer is the model's tokenizer (a tokenizer.json, its directory,
	// or tiktoken:<encoding>). Rank 0 reads its vocabulary to follow
	// structured outputs (grammars); without it such requests are
	// refused. Other ranks ignore it. Default "".
	Tokenizer string
	// MaxBatch is the most sequences decoded per step. Default 32.
	MaxBatch int
	// MaxBatchTokens bounds the prompt+output tokens across the batch's
	// rows; the oldest waiting request is admitted first. Default 0: no
	// bound.
	MaxBatchTokens int
	// KVBlocks is the KV cache rank 0 schedules, in blocks of BlockSize
	// tokens: a request is admitted only when its tokens' blocks fit
	// (beside a watermark of 1% of them), and when a running sequence
	// needs a block and none is free, the most recently admitted request
	// is preempted and recomputed later, with the same tokens. Default 0:
	// the blocks the worker reports at its handshake (none for the
	// synthetic executor, or a worker without a paged cache: memory is
	// then not scheduled). With a worker that reports blocks it may only
	// lower them.
	KVBlocks int
	// BlockSize is the tokens one KV block holds. A worker that reports
	// blocks must use the same. Default 16.
	BlockSize int
	// MaxModelLen is the most tokens, prompt and output, one request may
	// ask for: a longer one is refused (HTTP 400) in vLLM's words. Default
	// 0: the model's context as the worker reports it (no bound when it
	// reports none); it may only lower it.
	MaxModelLen int
	// MaxNumBatchedTokens is the most tokens one forward pass feeds,
	// summed over its rows: a longer prompt is prefilled over several
	// steps while the other rows go on decoding (chunked prefill). At
	// least MaxBatch; 0: no bound. Default 2048.
	MaxNumBatchedTokens int
	// EnablePrefixCaching keeps the KV blocks of every sequence's full
	// blocks findable by content once computed, so a request whose
	// tokens start with a cached prefix (a shared system prompt, the n
	// choices of one prompt, a preempted request coming back) shares
	// those blocks and computes only the rest. Only with a KV cache
	// scheduled. Default true, as vLLM's --enable-prefix-caching.
	EnablePrefixCaching bool
	// MaxQueue is the most requests waiting for a batch slot; more are
	// refused as overloaded. Default 1024.
	MaxQueue int
	// MaxLag is rank 0's flow control: it publishes step k only once
	// every follower has applied step k-1-MaxLag, so it runs at most
	// MaxLag+1 steps ahead of the slowest follower, and a follower never
	// needs more than that of the ReplayWindow while it keeps up. 0: a
	// step waits for every follower to apply the one before. Default 2.
	MaxLag int

	// RendezvousTimeout is how long to wait for every rank to join before
	// failing with the missing ones. Default 60s.
	RendezvousTimeout time.Duration
	// HeartbeatInterval is how often every rank heartbeats. Default
	// rank.DefaultHeartbeat (250ms).
	HeartbeatInterval time.Duration
	// HeartbeatTimeout declares a watched rank (rank 0 watches every
	// follower, followers watch rank 0) lost after this long without a
	// sign of life: about HeartbeatTimeout/HeartbeatInterval heartbeats
	// missed in a row (4 by default). 0 or more than HeartbeatInterval;
	// 0 leaves losses to membership alone (memberlist's suspicion
	// timeout, see Gossip). Default 1s.
	HeartbeatTimeout time.Duration
	// LivenessGrace is how long watched ranks get to be heard from after
	// this rank starts an epoch or its NATS connection comes back, before
	// HeartbeatTimeout applies: a rank silent since is lost LivenessGrace
	// after the (re)start. Default rank.DefaultLivenessGrace (10s).
	LivenessGrace time.Duration
	// OnPeerLoss is what the job does when a rank is lost: OnPeerLossFail
	// (default) or OnPeerLossWait. Every rank must agree (it is in the
	// digest).
	OnPeerLoss OnPeerLoss
	// ClientTimeout is how long rank 0 keeps a request whose client
	// promised or sent keepalives but has gone silent; clients send one
	// every api.KeepaliveInterval (400ms), so it must be longer, and
	// ClientTimeout/api.KeepaliveInterval keepalives (5 by default) may be
	// lost in a row. Default rank.DefaultClientTimeout (2s).
	ClientTimeout time.Duration
	// GossipKeyFile holds the gossip keyring (membership.ReadKeyring: one
	// base64 key per line, the first encrypts), readable by its owner only.
	// Default empty: gossip in the clear, which Validate refuses beyond
	// loopback unless Insecure is set.
	GossipKeyFile string
	// JobKeyFile holds the job's message key in base64 (32 bytes; see
	// broadcast.ReadKeyFile): every step, heartbeat and replay message is
	// sealed and checked with it. Default empty: the job has no key. Every
	// rank of a job must agree on whether there is one (it is in the
	// digest) and hold the same key.
	JobKeyFile string
	// RankClaimWait is how long an agent whose rank another member holds
	// keeps trying (the holder may be dead but not yet detected) before
	// failing with membership.ErrRankTaken. Default
	// membership.DefaultClaimWait (15s).
	RankClaimWait time.Duration
	// Gossip overrides memberlist's failure-detector timings. Default: all
	// zero, memberlist's LAN (or Local) timings.
	Gossip GossipTuning
	// Insecure accepts Exposures: memberlist beyond loopback without a
	// gossip key, NATS servers beyond loopback without credentials. Run
	// logs what is exposed once, as a warning. Default false.
	Insecure bool

	// ReplayWindow is how many published steps rank 0 keeps to replay to
	// a follower that missed some, in [1, 2^20]; a follower further
	// behind than ReplayWindow steps (or ReplayWindowBytes) cannot catch
	// up and aborts the job. It should be well above MaxLag+1. Default
	// rank.DefaultReplayWindow (1024).
	ReplayWindow int
	// ReplayWindowBytes bounds the memory of those steps too: the oldest
	// go first, the newest is always kept. Default
	// rank.DefaultReplayWindowBytes (64 MiB).
	ReplayWindowBytes int
	// ReplayTimeout bounds one replay request of a follower, and caps
	// the backoff between its retries. Default rank.DefaultReplayTimeout (2s).
	ReplayTimeout time.Duration
	// StepQueueBytes bounds the step messages a follower has received but
	// not yet applied: a step beyond it is dropped and recovered by
	// replay (an empty queue takes any step). Default
	// rank.DefaultStepQueueBytes (64 MiB). One step message is at most
	// the NATS server's max payload (rank.DefaultMaxStepBytes, 1 MiB, by
	// default), which is not a setting of the agent.
	StepQueueBytes int

	// Noise is where rank 0's Gumbel noise comes from: NoisePool (default)
	// or NoiseInline; NoiseSync is a benchmark baseline (tpcoord bench
	// e2e). The tokens are the same with each.
	Noise Noise
	// Sampling is the sampler: SamplingLogspace (default);
	// SamplingSoftmax is a benchmark baseline. The tokens are the same.
	Sampling Sampling
	// SamplingRanks are the ranks that sample: SamplingRanksRank0
	// (default); SamplingRanksAll is a benchmark baseline. Every rank must
	// agree (it is in the digest).
	SamplingRanks SamplingRanks
	// NoisePool sizes rank 0's noise pool (with NoisePool): default
	// noisepool.DefaultConfig() (128 rows, auto producers for 20ms steps,
	// lookahead 2, at most 1 GiB, form auto). Validate sets its Vocab to
	// Vocab and its Batch to MaxBatch.
	NoisePool noisepool.Config

	// TraceEvery traces every Nth step (0: none). Default 100.
	TraceEvery int
	// Telemetry is the OTLP export, the metrics listener and the flight
	// recorder. Default: no export or listener, and the flight recorder
	// keeps rank.DefaultFlightSteps (256) steps.
	Telemetry telemetry.Config
}

// WorkerConfig selects a model worker process (docs/worker-protocol.md),
// with ExecutorWorker; exactly one of Cmd and Socket.
type WorkerConfig struct {
	// Cmd is the command line the agent starts (split like a shell, no
	// shell run), "{socket}" and "{rank}" replaced. Default none.
	Cmd string
	// Socket is a running worker's Unix socket, "{rank}" replaced.
	// Default none.
	Socket string
	// DType is the logits type the worker writes: float32 (default),
	// float16 or bfloat16 (worker.ParseDType).
	DType string
	// ForwardTimeout is the deadline of one forward step; a worker that
	// does not answer in time aborts the job. Default
	// worker.DefaultForwardTimeout (30s).
	ForwardTimeout time.Duration
	// StartTimeout bounds starting or connecting to the worker and its
	// handshake, model loading included (a large checkpoint over a slow
	// disk may need more). Default worker.DefaultStartTimeout (5m).
	StartTimeout time.Duration
}

// GossipTuning overrides memberlist's failure-detector timings; zero keeps
// the LAN (or Local) default. memberlist declares a member that failed a
// probe dead after SuspicionTimeout = SuspicionMult × max(1, log10(N)) ×
// ProbeInterval for N members, unless it refutes (LAN: 4 × 1s = 4s for up
// to 10 members).
type GossipTuning struct {
	// ProbeInterval is the interval between probes of a random member
	// (LAN 1s, Local 1s).
	ProbeInterval time.Duration
	// ProbeTimeout is how long a probe waits for its ack; about the
	// network's RTT, below ProbeInterval (LAN 500ms, Local 200ms).
	ProbeTimeout time.Duration
	// GossipInterval is the interval between gossip rounds (LAN 200ms,
	// Local 100ms).
	GossipInterval time.Duration
	// SuspicionMult scales SuspicionTimeout (LAN 4, Local 3).
	SuspicionMult int
}

// DefaultConfig is a one-rank job on this host with the synthetic
// executor, the settings of a card at batch 32 and vocab 100352.
func DefaultConfig() Config {
	return Config{
		Job: "default", WorldSize: 1, Bind: "127.0.0.1:7946",
		NATS: "nats://127.0.0.1:4222", Prefix: "tpc",
		Executor: ExecutorSynthetic, ForwardTime: 20 * time.Millisecond,
		Worker: WorkerConfig{DType: "float32", ForwardTimeout: worker.DefaultForwardTimeout, StartTimeout: worker.DefaultStartTimeout},
		Vocab:  100352, EOS: 0, MaxBatch: 32, MaxQueue: 1024, MaxLag: 2, BlockSize: 16, MaxNumBatchedTokens: 2048, EnablePrefixCaching: true,
		RendezvousTimeout: 60 * time.Second,
		HeartbeatInterval: rank.DefaultHeartbeat, HeartbeatTimeout: time.Second, LivenessGrace: rank.DefaultLivenessGrace,
		OnPeerLoss: OnPeerLossFail, ClientTimeout: rank.DefaultClientTimeout, RankClaimWait: membership.DefaultClaimWait,
		ReplayWindow: rank.DefaultReplayWindow, ReplayWindowBytes: rank.DefaultReplayWindowBytes,
		ReplayTimeout: rank.DefaultReplayTimeout, StepQueueBytes: rank.DefaultStepQueueBytes,
		Noise: NoisePool, Sampling: SamplingLogspace, SamplingRanks: SamplingRanksRank0,
		NoisePool:  noisepool.DefaultConfig(),
		TraceEvery: 100,
		Telemetry:  telemetry.Config{FlightSteps: rank.DefaultFlightSteps},
	}
}

// Samples reports whether this rank runs a sampler: rank 0, or every rank
// with SamplingRanksAll.
func (c *Config) Samples() bool { return c.Rank == 0 || c.SamplingRanks == SamplingRanksAll }

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
	for _, check := range []func() error{c.validateIdentity, c.validateExposure, c.validateModel, c.validateKV, c.validateTiming, c.validateBuffers, c.validateModes} {
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
	if c.Noise == NoisePool && c.Samples() {
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
	case c.NATSServe && c.OnPeerLoss == OnPeerLossWait:
		return fielderr.New("NATSServe", "not with on-peer-loss wait: the bus would die with rank 0, and the followers could not re-form around a new one")
	}
	return nil
}

func (c *Config) validateModel() error {
	if err := c.Executor.Validate(); err != nil {
		return err
	}
	switch {
	case c.Vocab < 16 || c.Vocab > 1<<24:
		return fielderr.New("Vocab", "must be in [16, %d], got %d", 1<<24, c.Vocab)
	case c.EOS < -1 || c.EOS >= c.Vocab:
		return fielderr.New("EOS", "must be -1 or a token in [0, %d), got %d", c.Vocab, c.EOS)
	case c.Tokenizer != "" && c.EOS < 0:
		return fielderr.New("Tokenizer", "structured outputs need an end-of-sequence token: set EOS too")
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

// validateKV checks the KV cache's figures.
func (c *Config) validateKV() error {
	switch {
	case c.BlockSize < 1 || c.BlockSize > 1<<16:
		return fielderr.New("BlockSize", "must be in [1, 65536], got %d", c.BlockSize)
	case c.KVBlocks < 0 || c.KVBlocks > 1<<30:
		return fielderr.New("KVBlocks", "must be in [0, 2^30] (0: memory not scheduled), got %d", c.KVBlocks)
	case c.MaxModelLen < 0 || c.MaxModelLen > 1<<30:
		return fielderr.New("MaxModelLen", "must be in [0, 2^30] (0: the model's context), got %d", c.MaxModelLen)
	case c.MaxNumBatchedTokens != 0 && (c.MaxNumBatchedTokens < c.MaxBatch || c.MaxNumBatchedTokens > 1<<30):
		return fielderr.New("MaxNumBatchedTokens", "must be 0 (no bound) or in [max batch, 2^30] = [%d, 2^30]: every decoding row feeds a token each step, got %d", c.MaxBatch, c.MaxNumBatchedTokens)
	}
	return nil
}

// Memory is what rank 0 schedules of the KV cache, from the executor's
// capacity (zero for the synthetic executor and a worker without a paged
// cache) and the operator's flags, which may only lower it: the pool (nil:
// memory not scheduled), with 1% of its blocks (at least one, when there
// are two or more) kept free by admission, and the context.
func (c *Config) Memory(capacity rank.KVCapacity) (*core.KVConfig, int, error) {
	blocks, blockSize := capacity.Blocks, c.BlockSize
	if blocks > 0 {
		blockSize = capacity.BlockSize
	}
	switch {
	case c.KVBlocks > 0 && blocks > 0 && c.KVBlocks > blocks:
		return nil, 0, fielderr.New("KVBlocks", "--kv-blocks %d is more than the worker's KV cache holds (%d blocks of %d tokens); it may only lower it", c.KVBlocks, blocks, blockSize)
	case c.KVBlocks > 0:
		blocks = c.KVBlocks
	}
	maxLen := capacity.MaxModelLen
	switch {
	case c.MaxModelLen > 0 && maxLen > 0 && c.MaxModelLen > maxLen:
		return nil, 0, fielderr.New("MaxModelLen", "User-specified max_model_len (%d) is greater than the derived max_model_len (%d, the model's context as its worker reports it)", c.MaxModelLen, maxLen)
	case c.MaxModelLen > 0:
		maxLen = c.MaxModelLen
	}
	if blocks == 0 {
		return nil, maxLen, nil
	}
	watermark := min(max(blocks/100, 1), blocks-1)
	return &core.KVConfig{BlockSize: blockSize, Blocks: blocks, Watermark: watermark}, maxLen, nil
}

func (c *Config) validateTiming() error {
	switch {
	case c.RendezvousTimeout <= 0:
		return fielderr.New("RendezvousTimeout", "must be > 0, got %v", c.RendezvousTimeout)
	case c.HeartbeatInterval <= 0:
		return fielderr.New("HeartbeatInterval", "must be > 0, got %v", c.HeartbeatInterval)
	case c.HeartbeatTimeout < 0 || (c.HeartbeatTimeout > 0 && c.HeartbeatTimeout <= c.HeartbeatInterval):
		return fielderr.New("HeartbeatTimeout", "must be 0 or longer than the heartbeat interval (%v), got %v", c.HeartbeatInterval, c.HeartbeatTimeout)
	case c.LivenessGrace <= 0:
		return fielderr.New("LivenessGrace", "must be > 0, got %v", c.LivenessGrace)
	case c.ClientTimeout <= api.KeepaliveInterval:
		return fielderr.New("ClientTimeout", "must be longer than the clients' keepalive interval (%v), got %v", api.KeepaliveInterval, c.ClientTimeout)
	case c.ReplayTimeout <= 0:
		return fielderr.New("ReplayTimeout", "must be > 0, got %v", c.ReplayTimeout)
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
	for _, err := range []error{c.OnPeerLoss.Validate(), c.Noise.Validate(), c.Sampling.Validate(), c.SamplingRanks.Validate()} {
		if err != nil {
			return err
		}
	}
	return nil
}
