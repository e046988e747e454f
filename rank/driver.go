package rank

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"

	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/internal/fielderr"
	"github.com/tpcoord/tpcoord/rank/client"
	"github.com/tpcoord/tpcoord/rank/core"
)

// Errors that end a driver's Run. The agent maps them to exit codes.
var (
	// ErrAborted: the loop stopped because lockstep could not be kept
	// (gap, divergence, protocol error, abort from rank 0).
	ErrAborted = core.ErrAborted
	// ErrPeerLost: another rank died or left (see Driver.Abort).
	ErrPeerLost = core.ErrPeerLost
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

// Driver is the I/O loop of one rank. It is not safe to call Run twice.
type Driver struct {
	cfg   DriverConfig
	log   *slog.Logger
	tr    broadcast.Transport
	ex    Executor
	pick  Picker
	subj  broadcast.Subjects
	codec *broadcast.Codec

	// Owned by the Run goroutine.
	mirror *core.Mirror
	rank0  *core.Leader // rank 0: its decisions (nil on followers)

	steps     chan stepMsg
	queued    atomic.Int64 // followers: bytes of the messages in steps
	following uint32       // followers: leader of the last applied step, owned by Run
	intake    chan *Request
	wake      chan struct{}
	aborts    chan error
	window    *broadcast.Window  // rank 0: recent steps for replay
	ops       chan core.ClientOp // rank 0: cancels and keepalives from clients
	in        core.Input         // rank 0 loop: what arrived since the last boundary
	lp        *logprober         // rank 0: logprobs computed during the next forward
	behind    chan struct{}      // followers: rank 0 reported a step we lack
	// followers with FollowerPick: scratch for its results
	fpTokens []int32
	fpErrs   []error
	fpReqs   []*Request

	mu        sync.Mutex
	pos       position
	peerTab   *core.Peers
	leader    uint64    // followers: step rank 0 had applied one heartbeat ago
	leaderNow uint64    // followers: step rank 0 reported last
	deafAt    time.Time // the last time this rank's own connection was seen down
	rejected  map[string]uint64
	lastWarn  map[string]time.Time
}

// position is what status replies and heartbeats report, guarded by mu.
type position struct {
	phase           broadcast.Phase
	applied, digest uint64
	rows, waiting   int
	leader          uint32 // followers: leader of the last applied step
}

// Picker chooses one token per row from rank 0's logits. errs[i] is set for
// a row that cannot be sampled (for example NaN logits).
type Picker interface {
	Pick(rows []*Seq, reqs []*Request, logits []float32, vocab int, tokens []int32, errs []error)
}

// Prefetcher is a Picker that is told, before a step's forward pass, which
// rows (and requests) it will sample, so that it can prepare for them
// while the card works.
type Prefetcher interface {
	Prefetch(rows []*Seq, reqs []*Request)
}

// StepOverlapper is an Executor that says whether rank 0 may start its
// forward pass before the step message is written: true for a card whose
// forward pass does not wait for the followers' (the synthetic stand-in,
// whose ranks share no collective). Rank 0 waits for the write for any
// other executor. An executor that overlaps should give way
// (runtime.Gosched) early in Forward, so that the write goes out then.
type StepOverlapper interface {
	OverlapsStep() bool
}

func overlapsStep(ex Executor) bool {
	o, ok := ex.(StepOverlapper)
	return ok && o.OverlapsStep()
}

// NewDriver wires a rank's loop. pick is used on rank 0 only.
func NewDriver(cfg DriverConfig, tr broadcast.Transport, ex Executor, pick Picker) *Driver {
	cfg.defaults()
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d := &Driver{
		cfg:     cfg,
		log:     log,
		tr:      tr,
		ex:      ex,
		pick:    pick,
		subj:    broadcast.Subjects{Prefix: cfg.Prefix, Job: cfg.Job},
		codec:   broadcast.NewCodec(broadcast.JobHash(cfg.Job), cfg.Key),
		mirror:  core.NewMirror(cfg.Epoch),
		steps:   make(chan stepMsg, stepQueueLen),
		intake:  make(chan *Request, cfg.MaxQueue),
		wake:    make(chan struct{}, 1),
		aborts:  make(chan error, 1),
		peerTab: core.NewPeers(cfg.Rank, cfg.World, cfg.Epoch, cfg.HeartbeatTimeout, cfg.LivenessGrace),
		behind:  make(chan struct{}, 1),
		ops:     make(chan core.ClientOp, 4096),

		rejected: map[string]uint64{},
		lastWarn: map[string]time.Time{},
	}
	if cfg.Rank == 0 {
		sc := core.SchedulerConfig{MaxBatch: cfg.MaxBatch, MaxQueue: cfg.MaxQueue, EOS: cfg.EOS, MaxStepBytes: cfg.stepBudget(), MaxBatchTokens: cfg.MaxBatchTokens}
		d.rank0 = core.NewLeader(core.LeaderConfig{Scheduler: sc, ClientTimeout: cfg.ClientTimeout}, cfg.Resume, cfg.Clock())
		d.window = broadcast.NewWindow(cfg.ReplayWindow, cfg.ReplayWindowBytes)
		d.lp = newLogprober(ex.Vocab(), cfg.EOS)
	}
	d.attachTelemetry()
	return d
}

// PeerStopping reports whether rank r's last heartbeat said it is stopping
// on purpose: a peer that then leaves the cluster left, whatever the
// membership's goodbye says (it can be lost under load).
func (d *Driver) PeerStopping(r int) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.peerTab.Stopping(r)
}

// Abort stops Run at the next step boundary with err. It never blocks;
// only the first abort counts.
func (d *Driver) Abort(err error) {
	select {
	case d.aborts <- err:
	default:
	}
}

// InFlight returns rank 0's unfinished requests, waiting or admitted, in
// sequence order, with the tokens they have. Call it after Run returned,
// to resume them in the next epoch.
func (d *Driver) InFlight() []*Request {
	if d.rank0 == nil {
		return nil
	}
	d.take()
	return d.rank0.InFlight()
}

// Status returns this rank's current status.
func (d *Driver) Status() api.RankStatus {
	d.mu.Lock()
	p := d.pos
	var rejected map[string]uint64
	if len(d.rejected) > 0 {
		rejected = maps.Clone(d.rejected)
	}
	d.mu.Unlock()
	st := api.RankStatus{
		Rank: d.cfg.Rank, World: d.cfg.World, Job: d.cfg.Job, Version: d.cfg.Version, Member: d.cfg.Member, Epoch: d.cfg.Epoch,
		State: p.phase.String(), Step: p.applied, Digest: digestString(p.digest), Rows: p.rows, Waiting: p.waiting,
		Rejected: rejected,
	}
	if d.cfg.Rank == 0 {
		st.Vocab = d.ex.Vocab()
		if sp, ok := d.pick.(interface{ Stats() map[string]uint64 }); ok {
			st.Sampler = sp.Stats()
		}
		d.mu.Lock()
		st.Peers = d.peerTab.Status(d.cfg.Clock())
		d.mu.Unlock()
	}
	d.fillTelemetry(&st)
	return st
}

func digestString(d uint64) string { return fmt.Sprintf("%016x", d) }

// Run subscribes, then runs the decode loop until ctx is cancelled (a clean
// stop: nil) or the loop cannot go on (an error wrapping ErrAborted or
// ErrPeerLost). Every goroutine it starts has stopped when it returns.
func (d *Driver) Run(ctx context.Context) (err error) {
	unsubs, err := d.subscribe()
	defer func() {
		for _, u := range unsubs {
			_ = u()
		}
	}()
	if err != nil {
		return err
	}
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err = d.tr.Flush(fctx)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped while subscribing: a clean stop too
		}
		return fmt.Errorf("flush subscriptions: %w", err)
	}

	d.mu.Lock()
	d.peerTab.Restart(d.cfg.Clock())
	d.mu.Unlock()
	hbCtx, stopHB := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { d.heartbeatLoop(hbCtx) })
	defer func() {
		stopHB()
		wg.Wait()
		d.wrapUp(err, unsubs)
		unsubs = nil
	}()

	d.setPhase(broadcast.PhaseReady)
	d.sendHeartbeat()
	if d.cfg.Rank == 0 {
		return d.lead(ctx)
	}
	return d.follow(ctx)
}

// wrapUp ends a run that stopped with err: the last heartbeat says how,
// rank 0's open requests are answered (unless they are held for the next
// epoch), and the followers are told why rank 0 stopped.
func (d *Driver) wrapUp(err error, unsubs []func() error) {
	phase := broadcast.PhaseStopping
	if err != nil {
		phase = broadcast.PhaseAborted
	}
	d.setPhase(phase)
	d.sendHeartbeat()
	// Stop taking requests before answering the open ones, so none
	// slips in after the drain and is never answered.
	for _, u := range unsubs {
		_ = u()
	}
	d.sendLogprobs()
	hold := d.cfg.HoldOnPeerLoss && errors.Is(err, ErrPeerLost)
	if d.rank0 != nil && !hold {
		d.drain(err)
	}
	if err != nil && d.cfg.Rank == 0 {
		kind := api.ControlAbort
		if errors.Is(err, ErrPeerLost) {
			kind = api.ControlPeerLost
		}
		d.publishControl(api.Control{Kind: kind, Reason: err.Error()})
	}
	fctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	_ = d.tr.Flush(fctx)
	cancel()
}

// subscribe subscribes this rank's handlers. Status comes last: a rank
// that answers status has every other subscription live (the transport
// keeps a connection's subscriptions in order), so a client that saw rank
// 0 serving finds its generate subject answered.
func (d *Driver) subscribe() ([]func() error, error) {
	type handler struct {
		subject string
		fn      func(*broadcast.Msg)
	}
	var hs []handler
	if d.cfg.Rank == 0 {
		hs = []handler{{d.subj.Heartbeats(), d.onHeartbeat}, {d.subj.Generate(), d.onGenerate},
			{d.subj.Replay(), d.onReplay}, {d.subj.Client(), d.onClient}}
	} else {
		hs = []handler{{d.subj.Step(), d.onStep}, {d.subj.Heartbeat(0), d.onLeaderHeartbeat}}
	}
	// A supervisor (launch) reports ranks it saw die.
	hs = append(hs, handler{d.subj.Control(), d.onControl}, handler{d.subj.Status(), d.onStatus})
	var unsubs []func() error
	for _, h := range hs {
		u, err := d.tr.Subscribe(h.subject, h.fn)
		if err != nil {
			return unsubs, err
		}
		unsubs = append(unsubs, u)
	}
	return unsubs, nil
}

// Handlers run on the transport's delivery goroutine: they decode, hand
// off and return; none blocks.

func (d *Driver) onStep(m *broadcast.Msg) {
	epoch, k, err := d.codec.PeekStep(m.Data)
	if err != nil {
		d.reject("step", err)
		return
	}
	d.mu.Lock()
	applied := d.pos.applied
	d.mu.Unlock()
	if epoch != d.cfg.Epoch {
		d.reject("wrong_epoch", fmt.Errorf("step %d of epoch %d, this rank is in epoch %d", k, epoch, d.cfg.Epoch))
		return
	}
	if k <= applied {
		d.count("duplicate")
		return
	}
	arrived := time.Now()
	d.cfg.Metrics.observeBroadcast(m.Header, arrived)
	// Dropping is safe: the gap it leaves is filled by replay.
	size := int64(len(m.Data))
	if q, ok := d.reserveQueue(size); !ok {
		d.reject("step_queue_full", fmt.Errorf("step %d (%d bytes) dropped: %d bytes already queued, limit %d", k, size, q, d.cfg.StepQueueBytes))
		return
	}
	select {
	case d.steps <- stepMsg{data: append([]byte(nil), m.Data...), traceparent: m.Header[traceparentHeader], arrived: arrived}:
	default:
		d.queued.Add(-size)
		d.reject("step_queue_full", fmt.Errorf("step %d dropped: %d steps already queued", k, cap(d.steps)))
	}
}

// reserveQueue accounts size bytes to the step queue unless that would
// take it above StepQueueBytes; an empty queue takes any step, so one
// larger than the limit still gets through. It returns the bytes queued
// when it refuses. The follower loop gives the bytes back as it dequeues.
func (d *Driver) reserveQueue(size int64) (int64, bool) {
	for {
		q := d.queued.Load()
		if q > 0 && q+size > int64(d.cfg.StepQueueBytes) {
			return q, false
		}
		if d.queued.CompareAndSwap(q, q+size) {
			return q, true
		}
	}
}

func (d *Driver) onControl(m *broadcast.Msg) {
	var c api.Control
	if err := json.Unmarshal(m.Data, &c); err != nil {
		d.reject("control", err)
		return
	}
	from := c.From
	if from == "" {
		from = "rank 0"
	}
	if d.cfg.Rank == 0 && from == "rank 0" {
		return // our own announcement
	}
	switch c.Kind {
	case api.ControlAbort:
		d.Abort(fmt.Errorf("%w by %s: %s", ErrAborted, from, c.Reason))
	case api.ControlPeerLost:
		d.Abort(fmt.Errorf("%w (reported by %s): %s", ErrPeerLost, from, c.Reason))
	}
}

func (d *Driver) onHeartbeat(m *broadcast.Msg) {
	var hb broadcast.Heartbeat
	if err := d.codec.DecodeHeartbeat(m.Data, &hb); err != nil {
		d.reject("heartbeat", err, "subject", m.Subject)
		return
	}
	if hb.Rank == 0 && m.Subject == d.subj.Heartbeat(0) {
		if hb.Leader != d.cfg.Leader {
			d.reject("heartbeat_other_leader", fmt.Errorf("a rank 0 heartbeat from leader %08x, this rank 0 is %08x", hb.Leader, d.cfg.Leader), "subject", m.Subject)
		}
		return // our own
	}
	if hb.Rank == 0 || int(hb.Rank) >= d.cfg.World || m.Subject != d.subj.Heartbeat(int(hb.Rank)) {
		d.reject("heartbeat_sender", fmt.Errorf("heartbeat on %s claims rank %d", m.Subject, hb.Rank))
		return
	}
	// A follower that applied no step yet reports leader 0; one that
	// applied another leader's steps is not in this world.
	if hb.Leader != 0 && hb.Leader != d.cfg.Leader {
		d.reject("heartbeat_other_leader", fmt.Errorf("rank %d follows leader %08x, this rank 0 is %08x", hb.Rank, hb.Leader, d.cfg.Leader), "subject", m.Subject)
		return
	}
	d.mu.Lock()
	d.peerTab.HeardFrom(int(hb.Rank), &hb, d.cfg.Clock())
	d.mu.Unlock()
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

func (d *Driver) onStatus(m *broadcast.Msg) {
	if m.Reply == "" {
		return
	}
	st := d.Status()
	data, _ := json.Marshal(st)
	_ = d.tr.Publish(&broadcast.Msg{Subject: m.Reply, Data: data})
}

func (d *Driver) onGenerate(m *broadcast.Msg) {
	if m.Reply == "" {
		d.log.Warn("ignoring generate request without a reply subject")
		return
	}
	req, err := api.ParseGenerateRequest(m.Data, d.ex.Vocab())
	if err != nil {
		d.reply(m.Reply, api.FailedReply(err, api.CodeInvalid))
		return
	}
	// A request may be re-admitted in a new epoch with all its tokens, so
	// prompt + max_tokens must fit one step message and the decoder's bound.
	total := len(req.PromptTokenIDs) + req.MaxTokens
	if need := broadcast.StepSize(&broadcast.Step{}) + d.cfg.MaxBatch*20 + broadcast.AdmissionSize(total); need > d.cfg.stepBudget() || total > broadcast.MaxPromptLen {
		d.reply(m.Reply, api.FailedReply(fielderr.New("max_tokens",
			"prompt (%d tokens) plus max_tokens (%d) do not fit in one step message (%d bytes needed, %d available under the NATS max payload; at most %d tokens); lower max_tokens, shorten the prompt or raise max_payload",
			len(req.PromptTokenIDs), req.MaxTokens, need, d.cfg.stepBudget(), broadcast.MaxPromptLen), api.CodeInvalid))
		return
	}
	r := &Request{Prompt: req.PromptTokenIDs, MaxTokens: req.MaxTokens, Params: req.Params, Tag: m.Reply, Keepalives: req.Keepalive,
		Ext: &reqState{trace: requestTrace{parent: d.remoteParent(m.Header)}, times: requestTimes{received: time.Now()}}}
	select {
	case d.intake <- r:
	default:
		d.reply(m.Reply, api.FailedReply(core.Overloaded(len(d.intake)), api.CodeOverloaded))
	}
}

func (d *Driver) reply(subject string, r api.GenerateReply) {
	data, _ := json.Marshal(r)
	d.publishReply(subject, data)
}

func (d *Driver) publishReply(subject string, data []byte) {
	if err := d.tr.Publish(&broadcast.Msg{Subject: subject, Data: data}); err != nil {
		d.log.Warn("reply failed", "subject", subject, "err", err)
	}
}

func (d *Driver) publishControl(c api.Control) {
	data, _ := json.Marshal(c)
	_ = d.tr.Publish(&broadcast.Msg{Subject: d.subj.Control(), Data: data})
}

func (d *Driver) setPhase(p broadcast.Phase) {
	d.mu.Lock()
	d.pos.phase = p
	d.mu.Unlock()
}

// publishState records the mirror's position for status and heartbeats.
func (d *Driver) publishState() {
	p := position{phase: broadcast.PhaseRunning, applied: d.mirror.Applied(), digest: d.mirror.Digest(), rows: len(d.mirror.Rows()), leader: d.following}
	if d.rank0 != nil {
		p.waiting = d.rank0.Waiting()
	}
	d.mu.Lock()
	d.pos = p
	d.mu.Unlock()
}

func (d *Driver) sendHeartbeat() {
	d.mu.Lock()
	p := d.pos
	d.mu.Unlock()
	hb := broadcast.Heartbeat{Epoch: d.cfg.Epoch, Rank: uint32(d.cfg.Rank), Phase: p.phase, Applied: p.applied, Digest: p.digest, UnixNs: time.Now().UnixNano(), Leader: p.leader}
	if d.cfg.Rank == 0 {
		hb.Leader = d.cfg.Leader
	}
	if err := d.tr.Publish(&broadcast.Msg{Subject: d.subj.Heartbeat(d.cfg.Rank), Data: d.codec.AppendHeartbeat(nil, &hb)}); err != nil && !errors.Is(err, broadcast.ErrClosed) {
		d.log.Debug("heartbeat publish failed", "err", err)
	}
}

func (d *Driver) heartbeatLoop(ctx context.Context) {
	t := time.NewTicker(d.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			d.sendHeartbeat()
			d.checkLiveness(d.cfg.Clock())
		}
	}
}

// follow is the loop of ranks other than 0: apply every step in order,
// run forward, report. A gap is filled by replay from rank 0.
func (d *Driver) follow(ctx context.Context) error {
	var st broadcast.Step
	for {
		waitStart := time.Now()
		d.cfg.Flight.enter(PhaseAwait, waitStart)
		select {
		case <-ctx.Done():
			return nil
		case err := <-d.aborts:
			return err
		case <-d.behind:
			if len(d.steps) > 0 {
				continue // the steps may be on their way
			}
			if target := d.leaderApplied(); target > d.mirror.Applied() {
				if err := d.catchUp(ctx, target); err != nil {
					return err
				}
			}
		case msg := <-d.steps:
			d.queued.Add(-int64(len(msg.data)))
			if err := d.codec.DecodeStep(msg.data, &st); err != nil {
				d.reject("step", err)
				continue
			}
			if !d.follows(st.Leader) {
				d.reject("sender", fmt.Errorf("step %d published by leader %08x, rank 0 of this job is %08x", st.Step, st.Leader, d.cfg.Leader))
				continue
			}
			err := d.mirror.Check(&st)
			switch {
			case errors.Is(err, core.ErrDuplicate):
				d.count("duplicate")
				continue
			case errors.Is(err, core.ErrStaleEpoch) || errors.Is(err, core.ErrFutureEpoch):
				d.reject("wrong_epoch", err)
				continue
			case errors.Is(err, core.ErrGap):
				// The message that revealed the gap is not kept: replay
				// returns rank 0's own copy of it.
				if err := d.catchUp(ctx, st.Step); err != nil {
					return err
				}
				continue
			case err != nil:
				return fmt.Errorf("%w: rank %d: %w", ErrAborted, d.cfg.Rank, err)
			}
			sctx, end := d.followerSpans(ctx, msg, waitStart, &st)
			err = d.applyAndRun(sctx, &st)
			end()
			if err != nil {
				return err
			}
		}
	}
}

// applyAndRun applies the next step on a follower and runs its forward.
func (d *Driver) applyAndRun(ctx context.Context, st *broadcast.Step) error {
	d.cfg.Flight.enter(PhaseForward, time.Now())
	if err := d.mirror.Apply(st); err != nil {
		return fmt.Errorf("%w: rank %d: %w", ErrAborted, d.cfg.Rank, err)
	}
	d.following = st.Leader
	fctx, span := d.span(ctx, "forward")
	rows := d.mirror.Rows()
	logits, err := d.ex.Forward(fctx, Batch{Epoch: st.Epoch, Step: st.Step, Rows: rows})
	span.End()
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("%w: rank %d: forward of step %d: %w", ErrAborted, d.cfg.Rank, st.Step, err)
	}
	if d.cfg.FollowerPick != nil && len(rows) > 0 && len(logits) == len(rows)*d.ex.Vocab() {
		d.followerPick(rows, logits)
	}
	d.publishState()
	d.cfg.Flight.stepDone(st.Step, len(d.mirror.Rows()), time.Now())
	d.sendHeartbeat()
	return nil
}

// followerPick samples a follower's logits and discards the tokens (see
// DriverConfig.FollowerPick).
func (d *Driver) followerPick(rows []*Seq, logits []float32) {
	d.fpTokens, d.fpErrs = d.fpTokens[:0], d.fpErrs[:0]
	d.fpReqs = d.fpReqs[:0]
	for range rows {
		d.fpTokens, d.fpErrs = append(d.fpTokens, NoToken), append(d.fpErrs, nil)
		d.fpReqs = append(d.fpReqs, nil)
	}
	d.cfg.FollowerPick.Pick(rows, d.fpReqs, logits, d.ex.Vocab(), d.fpTokens, d.fpErrs)
}

// leadScratch is what rank 0's loop reuses from step to step.
type leadScratch struct {
	out    *stepSender
	buf    []byte
	tokens []int32
	errs   []error
	reqs   []*Request
}

// lead is rank 0's loop: schedule, publish, apply, forward, sample, stream.
func (d *Driver) lead(ctx context.Context) error {
	sc := leadScratch{out: d.startStepSender()}
	defer sc.out.stop()
	for k := uint64(1); ; {
		// A step boundary: stop here if asked, even when every step is
		// ready at once (no follower to wait for, a forward that does not
		// block), or a busy loop would never notice.
		select {
		case <-ctx.Done():
			return nil
		case err := <-d.aborts:
			return err
		default:
		}
		st := d.boundary(k)
		if st == nil || len(d.mirror.Rows())+len(st.Admitted)-len(st.Removed) == 0 {
			d.sendLogprobs() // no forward pass to hide them behind
		}
		if st == nil {
			if err := d.idle(ctx); err != nil || ctx.Err() != nil {
				return err
			}
			continue
		}
		d.cfg.Flight.enter(PhaseAwait, time.Now())
		if err := d.awaitFollowers(ctx, k); err != nil {
			if ctx.Err() != nil {
				return nil // cancelled while waiting: a clean stop
			}
			return err
		}
		if err := d.leadStep(ctx, k, st, &sc); err != nil || ctx.Err() != nil {
			return err
		}
		if err := d.checkDigests(); err != nil {
			return err
		}
		k++
	}
}

// idle waits, with nothing to run, for a request, a follower's heartbeat
// (whose digest is then checked: followers report the last steps of a
// burst after rank 0 went idle), an abort or the end.
func (d *Driver) idle(ctx context.Context) error {
	d.cfg.Flight.enter(PhaseIdle, time.Now())
	select {
	case <-ctx.Done():
		return nil
	case err := <-d.aborts:
		return err
	case <-d.wake:
		return d.checkDigests()
	case r := <-d.intake:
		d.in.Requests = append(d.in.Requests, r) // decided at the next boundary, at once
	}
	return nil
}

// leadStep publishes step k, applies it, and runs the forward pass and the
// sampler on the batch it leaves.
func (d *Driver) leadStep(ctx context.Context, k uint64, st *broadcast.Step, sc *leadScratch) error {
	st.Leader = d.cfg.Leader
	sctx, stepSpan := d.leaderSpan(ctx, k)
	defer stepSpan.End()
	d.cfg.Flight.enter(PhasePublish, time.Now())
	sc.buf = d.codec.AppendStep(sc.buf[:0], st)
	d.window.Add(st.Epoch, k, sc.buf)
	if err := d.mirror.Apply(st); err != nil {
		return fmt.Errorf("%w: rank 0 cannot apply its own step: %w", ErrAborted, err)
	}
	d.mu.Lock()
	d.peerTab.RecordDigest(k, d.mirror.Digest())
	d.mu.Unlock()
	rows := d.mirror.Rows()
	if len(rows) == 0 {
		sc.out.send(ctx, sctx, k, sc.buf, traceHeader(sctx))
	} else if err := d.forwardAndSample(ctx, sctx, k, rows, sc); err != nil || ctx.Err() != nil {
		return err
	}
	d.publishState()
	d.cfg.Flight.stepDone(k, len(rows), time.Now())
	return nil
}

// forwardAndSample runs step k's forward pass on rows, picks their tokens
// and streams them to the requesters.
func (d *Driver) forwardAndSample(ctx, sctx context.Context, k uint64, rows []*Seq, sc *leadScratch) error {
	d.cfg.Flight.enter(PhaseForward, time.Now())
	fctx, fwd := d.span(sctx, "forward")
	sc.tokens, sc.errs, sc.reqs = sc.tokens[:0], sc.errs[:0], sc.reqs[:0]
	for _, r := range rows {
		sc.tokens, sc.errs = append(sc.tokens, NoToken), append(sc.errs, nil)
		sc.reqs = append(sc.reqs, d.rank0.Request(r.ID))
	}
	if p, ok := d.pick.(Prefetcher); ok {
		p.Prefetch(rows, sc.reqs) // noise rows made while the card works
	}
	d.lp.start() // the previous step's logprobs, while the card works
	if !d.sendStep(ctx, sctx, k, sc) {
		return nil // cancelled while the step was being written
	}
	logits, err := d.ex.Forward(fctx, Batch{Epoch: d.cfg.Epoch, Step: k, Rows: rows})
	fwd.End()
	d.sendLogprobs()
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("%w: rank 0: forward of step %d: %w", ErrAborted, k, err)
	}
	_, smp := d.span(sctx, "sample", attribute.Int("rows", len(rows)))
	d.cfg.Flight.enter(PhaseSample, time.Now())
	d.pick.Pick(rows, sc.reqs, logits, d.ex.Vocab(), sc.tokens, sc.errs)
	for i, err := range sc.errs {
		if err != nil {
			// Only rank 0's model returns logits: a row it cannot sample
			// (NaN, +Inf) fails that request alone, naming where it came from.
			sc.errs[i] = fmt.Errorf("rank 0: step %d, sequence %d: %w", k, rows[i].ID, err)
		}
	}
	d.cfg.Flight.enter(PhaseReply, time.Now())
	smp.End()
	d.lp.capture(rows, sc.reqs, logits, sc.tokens, sc.errs)
	d.stream(d.rank0.Sampled(rows, sc.tokens, sc.errs))
	return nil
}

// sendStep hands step k's message (in sc.buf) to the step sender, and
// waits until it is written unless the executor overlaps its forward pass
// with the write. It is called last before Forward: the goroutines woken
// before it (prefetch, logprobs) then run after the sender, since the
// last goroutine made ready runs first when the loop next waits. The
// wait is charged to the publish phase. It returns false if ctx ended
// while it waited.
func (d *Driver) sendStep(ctx, sctx context.Context, k uint64, sc *leadScratch) bool {
	written := sc.out.send(ctx, sctx, k, sc.buf, traceHeader(sctx))
	if overlapsStep(d.ex) {
		return true
	}
	d.cfg.Flight.enter(PhasePublish, time.Now())
	defer func() { d.cfg.Flight.enter(PhaseForward, time.Now()) }()
	select {
	case <-written:
		return true
	case <-ctx.Done():
		return false
	}
}

// gather collects what reached rank 0 since the last boundary into d.in.
func (d *Driver) gather() {
	for {
		select {
		case r := <-d.intake:
			d.in.Requests = append(d.in.Requests, r)
		case op := <-d.ops:
			d.in.Ops = append(d.in.Ops, op)
		default:
			d.mu.Lock()
			d.in.Deaf = d.deafAt // nobody could be heard then: silence counts from it
			d.mu.Unlock()
			return
		}
	}
}

// boundary is rank 0's step boundary: what arrived goes to the leader's
// core, which decides step k; its answers go out in the order it gives.
// It returns the step to publish, or nil when there is nothing to run.
func (d *Driver) boundary(k uint64) *broadcast.Step {
	d.gather()
	rd := d.rank0.Step(d.cfg.Clock(), d.cfg.Epoch, k, d.in)
	d.act(rd)
	now := time.Now()
	for _, r := range rd.Admitted {
		if t := &state(r).times; t.scheduled.IsZero() { // one resumed keeps its first stamp
			t.scheduled = now
		}
	}
	return rd.Step
}

// take hands what arrived to the leader's core without deciding a step
// (before InFlight and the final drain), and acts on its answers.
func (d *Driver) take() {
	d.gather()
	d.act(d.rank0.Take(d.cfg.Clock(), d.in))
}

// act does what the core decided at a boundary, in its order, and
// empties the input it consumed.
func (d *Driver) act(rd *core.Ready) {
	clear(d.in.Requests)
	clear(d.in.Ops)
	d.in.Requests, d.in.Ops = d.in.Requests[:0], d.in.Ops[:0]
	for _, f := range rd.Refused {
		d.reply(f.Req.Tag, api.FailedReply(f.Err, f.Code))
	}
	for _, r := range rd.Submitted {
		d.requestStarted(r)
	}
	for _, a := range rd.Acks {
		d.ack(a.Subject, a.Known)
	}
	now := time.Now()
	for _, r := range rd.Ended {
		d.finish(r, now)
	}
}

// awaitFollowers blocks until every follower has reported this epoch and
// applied at least step k-1-MaxLag, so rank 0 runs at most MaxLag+1 steps
// ahead of the slowest rank.
func (d *Driver) awaitFollowers(ctx context.Context, k uint64) error {
	need := int64(k) - 1 - int64(d.cfg.MaxLag)
	progress := time.NewTicker(5 * time.Second)
	defer progress.Stop()
	start := time.Now()
	for {
		slowest, behind := d.slowest(need)
		if slowest < 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-d.aborts:
			return err
		case <-d.wake:
			// A follower that diverged may be the one rank 0 waits for.
			if err := d.checkDigests(); err != nil {
				return err
			}
		case <-progress.C:
			d.log.Info("waiting for followers", "step", k, "slowest_rank", slowest, "detail", behind, "waited", time.Since(start).Round(time.Second))
		}
	}
}

// slowest returns a follower that has not reached need, or -1.
func (d *Driver) slowest(need int64) (int, string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.peerTab.Slowest(need)
}

// checkDigests compares every follower's reported digest with rank 0's at
// the same step.
func (d *Driver) checkDigests() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.peerTab.Diverged()
}

func (d *Driver) stream(events []Event) {
	now := time.Now()
	for _, ev := range events {
		r := ev.Req
		t := &state(r).times
		if ev.Token != NoToken && r.Err == nil {
			if t.first.IsZero() {
				t.first = now
			}
			t.last = now
			d.publishReply(r.Tag, client.AppendTokenReply(nil, ev.Token, ev.Index))
		}
		if ev.Done {
			if j := d.lp.pending(r); j != nil {
				j.finish = true // after its logprobs
				continue
			}
			d.finish(r, now)
		}
	}
}

// sendLogprobs sends the logprobs computed for the last sampled tokens,
// then the final replies that waited for them.
func (d *Driver) sendLogprobs() {
	if d.lp == nil {
		return
	}
	now := time.Now()
	for _, j := range d.lp.wait() {
		if j.err == nil {
			res := j.res
			d.reply(j.req.Tag, api.GenerateReply{Index: j.index, Logprobs: &res})
		} else {
			d.log.Warn("logprobs failed", "seq", j.req.Seq, "err", j.err)
		}
		if j.finish {
			d.finish(j.req, now)
		}
	}
}

func (d *Driver) finish(r *Request, now time.Time) {
	d.requestFinished(r, now)
	rep := api.GenerateReply{Done: true, FinishReason: r.Finish, Tokens: r.Output}
	if rep.Tokens == nil {
		rep.Tokens = []int32{}
	}
	if r.Err != nil {
		rep.Error = r.Err.Error()
	}
	if t := state(r).times; !t.received.IsZero() {
		tm := &api.Timings{TotalMs: ms(now.Sub(t.received))}
		if !t.scheduled.IsZero() {
			tm.QueueMs = ms(t.scheduled.Sub(t.received))
		}
		if !t.first.IsZero() {
			tm.FirstTokenMs = ms(t.first.Sub(t.received))
			if n := len(r.Output); n > 1 {
				tm.MeanITLMs = ms(t.last.Sub(t.first)) / float64(n-1)
			}
		}
		rep.Timings = tm
	}
	d.reply(r.Tag, rep)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// drain answers every open request when the loop stops.
func (d *Driver) drain(cause error) {
	d.take()
	reason, err := api.FinishError, cause
	if cause == nil {
		err = errors.New("rank 0 is shutting down")
	}
	now := time.Now()
	for _, r := range d.rank0.Drain(reason, err) {
		d.finish(r, now)
	}
}
