package rank

import (
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/rank/core"
)

// DriverConfig configures one rank's decode loop.
type DriverConfig struct {
	Job      string
	Prefix   string
	Rank     int
	World    int
	Epoch    uint32
	MaxBatch int
	MaxQueue int
	MaxLag   int // steps rank 0 may publish beyond the slowest follower's last applied step + 1
	// ClientTimeout cancels a request whose client stopped sending
	// keepalives (default DefaultClientTimeout).
	ClientTimeout time.Duration
	// MaxBatchTokens bounds the prompt and output tokens of the batch's
	// rows (0: none); see SchedulerConfig.
	MaxBatchTokens int
	Heartbeat      time.Duration // periodic heartbeat interval (default DefaultHeartbeat)
	EOS            int32
	Version        string
	Member         string // this agent's member name, reported in status
	Logger         *slog.Logger
	// ReplayWindow is how many published steps rank 0 keeps for followers
	// that missed some (default DefaultReplayWindow).
	ReplayWindow int
	// ReplayWindowBytes bounds the memory of those steps too (default
	// DefaultReplayWindowBytes): the oldest go first, the newest is always
	// kept.
	ReplayWindowBytes int
	// StepQueueBytes bounds the step messages a follower has received but
	// not yet applied (default DefaultStepQueueBytes). A step that would
	// take the queue above it is dropped like one arriving at a full queue
	// (counted as step_queue_full) and recovered by replay; a step arriving
	// at an empty queue is always taken, whatever its size.
	StepQueueBytes int
	// Steps, if set, is where rank 0 publishes its step messages; every
	// other message uses the Driver's transport. The agent gives rank 0 a
	// connection of its own for steps that writes each one out at once,
	// while client replies and heartbeats on the other are batched.
	Steps broadcast.Transport
	// MaxStepBytes bounds one step message (the transport's max payload);
	// admissions that do not fit wait for a later step (default
	// DefaultMaxStepBytes).
	MaxStepBytes int
	// ReplayTimeout bounds one replay request (default DefaultReplayTimeout).
	ReplayTimeout time.Duration
	// Leader is rank 0's publisher ID: on rank 0 the ID it stamps on its
	// steps, on followers the only ID they accept (0: accept any).
	Leader uint32
	// Key is the job's message key (nil: none). Rank 0 seals its steps and
	// replay replies with it, every rank its heartbeats and replay
	// requests; every rank refuses a step, heartbeat or replay message
	// whose MAC does not verify under it (counted as "mac").
	Key broadcast.Key
	// Tracer traces every TraceEvery-th step (0: none). Followers' spans
	// join rank 0's trace through the traceparent header of the step.
	Tracer     trace.Tracer
	TraceEvery int
	// Flight records the last steps' phase timings (one is made if nil);
	// Metrics, if set, receive them (see metrics.go). Both outlive epochs.
	Flight  *FlightRecorder
	Metrics *Metrics
	// HeartbeatTimeout declares a peer lost when nothing was heard from it
	// for this long (0: only membership detects losses). Rank 0 watches
	// every follower, followers watch rank 0.
	HeartbeatTimeout time.Duration
	// LivenessGrace is how long peers get to speak after this rank starts
	// or its own connection comes back, before silence counts (default
	// DefaultLivenessGrace).
	LivenessGrace time.Duration
	// HoldOnPeerLoss keeps rank 0's open requests when Run ends with
	// ErrPeerLost, for InFlight and the next epoch, instead of answering
	// them with an error.
	HoldOnPeerLoss bool
	// Clock is the time the loop's decisions use: peer liveness and
	// client timeouts (default time.Now). api.Timings it measures (the flight
	// recorder, metrics) use the wall clock.
	Clock func() time.Time
	// KV, if set, is the KV cache rank 0 schedules (core.SchedulerConfig.KV):
	// admission by blocks, preemption by recompute. nil: not scheduled.
	KV *core.KVConfig
	// MaxModelLen is core.SchedulerConfig.MaxModelLen (0: no bound).
	MaxModelLen int
	// Capacity is the KV cache this rank's executor reported, with the
	// blocks rank 0 schedules of it (--kv-blocks may lower them).
	// Heartbeats carry it, and rank 0 stops the job when a follower's
	// differs from its own: the ranks' workers would page different
	// pools.
	Capacity KVCapacity
	// MaxNumBatchedTokens is core.SchedulerConfig.MaxNumBatchedTokens,
	// the tokens one forward pass feeds: longer prompts are prefilled in
	// chunks over several steps (0: no bound; else at least MaxBatch, or
	// Run refuses to start).
	MaxNumBatchedTokens int
	// PrefixCaching is core.SchedulerConfig.PrefixCaching: with KV, a
	// request starts with the longest prefix of its tokens whose blocks
	// the cache still holds, and computes only the rest.
	PrefixCaching bool
	// Resume are the requests in flight when the previous epoch stopped
	// (Driver.InFlight of its rank 0): they are admitted first, with the
	// tokens they already have, and go on streaming to their requesters.
	Resume []*Request
	// FollowerPick, if set, runs on followers after every forward pass on
	// that pass's logits, and its tokens are discarded: the redundant
	// sampling on every rank that sampling on rank 0 alone removed, kept
	// for benchmarks (--sampling-ranks all). The executor must then return
	// logits on followers too. Followers do not know the requests'
	// parameters, so rows are sampled with the default ones.
	FollowerPick Picker
	// Grammars, on rank 0, checks the structured outputs of requests as
	// they arrive (the Picker follows them); nil: such requests are
	// refused, naming the missing tokenizer.
	Grammars Grammars
}

// Defaults of DriverConfig's fields, which defaults() fills in for zero
// values; the agent's DefaultConfig starts from the same constants.
const (
	DefaultHeartbeat    = 250 * time.Millisecond
	DefaultReplayWindow = 1024
	// The byte budgets: with steps up to the NATS max payload (8 MiB at
	// most), the step counts alone would let the replay window and a
	// follower's step queue grow to gigabytes each.
	DefaultReplayWindowBytes = 64 << 20
	DefaultStepQueueBytes    = 64 << 20
	DefaultMaxStepBytes      = 1 << 20 // NATS's default max payload
	DefaultReplayTimeout     = 2 * time.Second
	DefaultLivenessGrace     = 10 * time.Second
)

// stepQueueLen bounds the steps a follower has received but not applied.
const stepQueueLen = 1024

// stepHeadroom is what a step message leaves free of the max payload for
// NATS headers (traceparent, send time) and for the framing of a replay
// reply that carries it.
const stepHeadroom = 4096

// stepBudget is the largest step encoding the scheduler may build.
func (c *DriverConfig) stepBudget() int { return max(c.MaxStepBytes-stepHeadroom, c.MaxStepBytes/2) }

func (c *DriverConfig) defaults() {
	if c.ReplayWindow <= 0 {
		c.ReplayWindow = DefaultReplayWindow
	}
	if c.ReplayWindowBytes <= 0 {
		c.ReplayWindowBytes = DefaultReplayWindowBytes
	}
	if c.StepQueueBytes <= 0 {
		c.StepQueueBytes = DefaultStepQueueBytes
	}
	if c.MaxStepBytes <= 0 {
		c.MaxStepBytes = DefaultMaxStepBytes
	}
	if c.ReplayTimeout <= 0 {
		c.ReplayTimeout = DefaultReplayTimeout
	}
	if c.Heartbeat <= 0 {
		c.Heartbeat = DefaultHeartbeat
	}
	if c.ClientTimeout <= 0 {
		c.ClientTimeout = DefaultClientTimeout
	}
	if c.LivenessGrace <= 0 {
		c.LivenessGrace = DefaultLivenessGrace
	}
	if c.Tracer == nil {
		c.Tracer = noop.NewTracerProvider().Tracer("")
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
}
