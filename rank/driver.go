package rank

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"

	"sync"
	"sync/atomic"
	"time"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/broadcast/api"
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
	// The role's own state: l on rank 0, f on the followers; the other
	// is nil.
	l *leaderState
	f *followerState

	wake   chan struct{}
	aborts chan error

	mu       sync.Mutex
	pos      position
	peerTab  *core.Peers
	deafAt   time.Time     // the last time this rank heard nobody: its connection down, or the process frozen
	lastLate time.Duration // how late the heartbeat ticker's last tick came (core.Late)
	lastTick time.Time     // the heartbeat loop's last tick, on the wall clock (core.Frozen)
	rejected map[string]uint64
	lastWarn map[string]time.Time
	initErr  error // a configuration NewDriver could not take: Run returns it

	// maxStepTokens is the most tokens one applied step fed (status and
	// metrics read it).
	maxStepTokens atomic.Int64
	// fedTokens is the tokens every applied step fed, summed: what the
	// forward passes computed (a cached prefix is not).
	fedTokens atomic.Int64
}

// leaderState is what only rank 0 keeps.
type leaderState struct {
	core   *core.Leader       // its decisions; owned by Run
	intake chan *Request      // requests off the bus, for the loop
	ops    chan core.ClientOp // cancels and keepalives from clients
	in     core.Input         // what arrived since the last boundary; owned by Run
	window *broadcast.Window  // recent steps, for replay
	lp     *logprober         // logprobs computed during the next forward
}

// followerState is what only a follower keeps.
type followerState struct {
	steps     chan stepMsg
	queued    atomic.Int64  // bytes of the messages in steps
	following uint32        // leader of the last applied step; owned by Run
	behind    chan struct{} // rank 0 reported a step we lack
	// Guarded by the Driver's mu.
	leader    uint64 // step rank 0 had applied one heartbeat ago
	leaderNow uint64 // step rank 0 reported last
	// With FollowerPick: scratch for its results.
	fpTokens []int32
	fpErrs   []error
	fpReqs   []*Request
}

// position is what status replies and heartbeats report, guarded by mu.
type position struct {
	phase           broadcast.Phase
	applied, digest uint64
	rows, waiting   int
	kv              *api.KVStatus // rank 0 with a KV cache
	leader          uint32        // followers: leader of the last applied step
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
		wake:    make(chan struct{}, 1),
		aborts:  make(chan error, 1),
		peerTab: core.NewPeers(cfg.Rank, cfg.World, cfg.Epoch, cfg.HeartbeatTimeout, cfg.LivenessGrace),

		rejected: map[string]uint64{},
		lastWarn: map[string]time.Time{},
	}
	if cfg.Rank != 0 {
		d.f = &followerState{steps: make(chan stepMsg, stepQueueLen), behind: make(chan struct{}, 1)}
	} else {
		sc := core.SchedulerConfig{
			MaxBatch: cfg.MaxBatch, MaxQueue: cfg.MaxQueue, EOS: cfg.EOS, MaxStepBytes: cfg.stepBudget(), MaxBatchTokens: cfg.MaxBatchTokens,
			KV: cfg.KV, MaxModelLen: cfg.MaxModelLen, MaxNumBatchedTokens: cfg.MaxNumBatchedTokens,
			PrefixCaching: cfg.PrefixCaching,
		}
		d.l = &leaderState{
			intake: make(chan *Request, cfg.MaxQueue),
			ops:    make(chan core.ClientOp, 4096),
			window: broadcast.NewWindow(cfg.ReplayWindow, cfg.ReplayWindowBytes),
			lp:     newLogprober(ex.Vocab(), cfg.EOS),
		}
		d.l.core, d.initErr = core.NewLeader(core.LeaderConfig{Scheduler: sc, ClientTimeout: cfg.ClientTimeout}, cfg.Resume, cfg.Clock())
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
	if d.l == nil {
		return nil
	}
	d.take()
	return d.l.core.InFlight()
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
		State: p.phase.String(), Step: p.applied, Digest: digestString(p.digest), Rows: p.rows, Waiting: p.waiting, KV: p.kv,
		Rejected: rejected, MaxStepTokens: int(d.maxStepTokens.Load()),
	}
	if d.cfg.Rank == 0 {
		st.Vocab, st.MaxModelLen = d.ex.Vocab(), d.cfg.MaxModelLen
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

// applied notes what the step the mirror just applied fed.
func (d *Driver) applied() {
	n := int64(d.mirror.StepTokens())
	if n > d.maxStepTokens.Load() {
		d.maxStepTokens.Store(n) // only the Run goroutine writes it
	}
	d.fedTokens.Add(n)
}

func digestString(d uint64) string { return fmt.Sprintf("%016x", d) }

// Run subscribes, then runs the decode loop until ctx is cancelled (a clean
// stop: nil) or the loop cannot go on (an error wrapping ErrAborted or
// ErrPeerLost). Every goroutine it starts has stopped when it returns.
func (d *Driver) Run(ctx context.Context) (err error) {
	if d.initErr != nil {
		return d.initErr
	}
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
	if d.l != nil && !hold {
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
