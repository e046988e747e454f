package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/coordinator/membership"
	"github.com/tpcoord/tpcoord/rank"
	"github.com/tpcoord/tpcoord/rank/client"
)

// world is an agent's view of the job's membership across epochs, and the
// loop that runs one decode loop per epoch.
type world struct {
	r      *run
	picker rank.Picker
	leader uint32 // rank 0's publisher ID
	epoch  uint32 // rank 0's epoch
	resume []*rank.Request
}

// adopt takes rank 0's leader ID and epoch from the formed world.
func (w *world) adopt(members []membership.Member) error {
	for _, m := range members {
		if m.Meta.Rank == 0 {
			w.leader, w.epoch = m.Meta.Leader, m.Meta.Epoch
		}
	}
	if w.leader == 0 {
		return fmt.Errorf("rank 0 of job %s advertises no leader ID (is it an older tpcoord?)", w.r.a.cfg.Job)
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

// loop runs epochs until the job stops: nil for a clean stop, or the error
// that ended the last epoch.
func (w *world) loop(ctx context.Context) error {
	cfg, log := &w.r.a.cfg, w.r.log
	for {
		peerLeft, err := w.runEpoch(ctx)
		var moved *rank.EpochMovedError
		switch {
		case cfg.OnPeerLoss == OnPeerLossWait && errors.As(err, &moved):
			// Rank 0 re-formed the world with this rank in it: follow it.
			log.Warn("rank 0 leads a later epoch; following it", "epoch", moved.Epoch, "was", moved.Was)
			w.epoch = moved.Epoch
			continue
		case err == nil:
			if !peerLeft {
				log.Info("agent stopped")
			}
			return nil
		case !errors.Is(err, rank.ErrPeerLost) || cfg.OnPeerLoss == OnPeerLossFail:
			return err
		}
		if err := w.waitReform(ctx, err); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
}

// runEpoch makes the epoch's executor and driver and runs it.
func (w *world) runEpoch(ctx context.Context) (peerLeft bool, err error) {
	a := w.r.a
	info, err := w.epochInfo(ctx)
	if err == nil {
		var ex rank.Executor
		if ex, err = a.o.executors(ctx, info); err == nil {
			return w.runExecutor(ctx, ex)
		}
	}
	if ctx.Err() != nil {
		return false, nil
	}
	return false, fmt.Errorf("start the executor: %w", err)
}

// runExecutor runs the epoch's decode loop on ex, and closes ex.
func (w *world) runExecutor(ctx context.Context, ex rank.Executor) (peerLeft bool, err error) {
	a := w.r.a
	defer func() {
		if cerr := ex.Close(); cerr != nil {
			w.r.log.Warn("executor close", "err", cerr)
		}
	}()
	dcfg, err := w.driverConfig(ex)
	if err != nil {
		return false, err
	}
	d := rank.NewDriver(dcfg, w.r.bus.Main, ex, w.picker)
	a.setDriver(d)
	defer a.setDriver(nil)
	peerLeft, err = w.watch(ctx, d)
	if err != nil {
		w.r.tel.DumpFlight(err.Error())
	}
	if errors.Is(err, rank.ErrPeerLost) {
		w.resume = d.InFlight()
	}
	return peerLeft, err
}

// driverConfig is the epoch's decode loop configuration, with the KV
// cache ex reports.
func (w *world) driverConfig(ex rank.Executor) (rank.DriverConfig, error) {
	cfg, r := &w.r.a.cfg, w.r
	var capacity rank.KVCapacity
	if cr, ok := ex.(rank.CapacityReporter); ok {
		capacity = cr.KVCapacity()
	}
	kv, maxLen, err := cfg.Memory(capacity)
	if err != nil {
		return rank.DriverConfig{}, err
	}
	if kv != nil && capacity.Blocks > 0 {
		// The ranks must agree on the pool rank 0 schedules: their
		// workers' may differ as long as --kv-blocks lowers them alike.
		capacity.Blocks = kv.Blocks
	}
	if kv != nil && cfg.Rank == 0 {
		r.log.Info("KV cache", "blocks", kv.Blocks, "block_size", kv.BlockSize, "tokens", kv.Blocks*kv.BlockSize, "max_model_len", maxLen)
	}
	dcfg := rank.DriverConfig{
		Job: cfg.Job, Prefix: cfg.Prefix, Rank: cfg.Rank, World: cfg.WorldSize, Epoch: w.epoch, Leader: w.leader, Key: r.key,
		MaxBatch: cfg.MaxBatch, MaxQueue: cfg.MaxQueue, MaxLag: cfg.MaxLag, MaxBatchTokens: cfg.MaxBatchTokens, KV: kv, MaxModelLen: maxLen, Capacity: capacity, MaxNumBatchedTokens: cfg.MaxNumBatchedTokens,
		PrefixCaching: cfg.EnablePrefixCaching,
		Heartbeat:     cfg.HeartbeatInterval, HeartbeatTimeout: cfg.HeartbeatTimeout, LivenessGrace: cfg.LivenessGrace,
		ClientTimeout: cfg.ClientTimeout, ReplayTimeout: cfg.ReplayTimeout,
		EOS: int32(cfg.EOS), Version: r.a.o.version, Member: r.cl.Name(), Logger: r.log,
		ReplayWindow: cfg.ReplayWindow, MaxStepBytes: r.bus.MaxPayload,
		ReplayWindowBytes: cfg.ReplayWindowBytes, StepQueueBytes: cfg.StepQueueBytes,
		Tracer: r.tel.Tracer(), TraceEvery: cfg.TraceEvery,
		Flight: r.flight, Metrics: r.metrics,
		HoldOnPeerLoss: cfg.OnPeerLoss == OnPeerLossWait,
		Steps:          r.bus.Steps,
		Resume:         w.resume,
	}
	if cfg.Rank != 0 && cfg.SamplingRanks == SamplingRanksAll {
		dcfg.FollowerPick = w.picker
	}
	if r.grammars != nil {
		dcfg.Grammars = r.grammars
	}
	return dcfg, nil
}

// watch runs one epoch's decode loop and turns membership events into its
// stop: a failed peer aborts it with ErrPeerLost, a peer that left on
// purpose stops it cleanly (peerLeft), and on a follower a change of rank
// 0's epoch or leader ends it as a peer loss, so it re-forms.
func (w *world) watch(ctx context.Context, d *rank.Driver) (peerLeft bool, err error) {
	cfg, log, cl := &w.r.a.cfg, w.r.log, w.r.cl
	// Events from before this world formed were dropped when it formed
	// (membership); those since are about this epoch's peers.
	dctx, dcancel := context.WithCancel(ctx)
	defer dcancel()
	done := make(chan error, 1)
	if err := w.r.g.Go("decode loop", func() { done <- d.Run(dctx) }); err != nil {
		return false, err
	}
	closed := w.r.bus.Closed
	for {
		select {
		case ev := <-cl.Events():
			if ev.Left || d.PeerStopping(ev.Member.Meta.Rank) {
				// A peer shut down on purpose: the job is being stopped.
				log.Info("peer left the job; stopping", "peer", ev.String())
				peerLeft = true
				dcancel()
				continue
			}
			log.Error("peer lost; stopping the decode loop", "peer", ev.String())
			d.Abort(fmt.Errorf("%w: %s", rank.ErrPeerLost, ev))
		case <-cl.Changes():
			if cfg.Rank != 0 && w.rank0Changed(cl.Members()) {
				log.Warn("rank 0 moved to another epoch or was replaced; re-forming")
				d.Abort(fmt.Errorf("%w: rank 0 changed epoch or leader", rank.ErrPeerLost))
			}
		case <-closed:
			closed = nil
			log.Error("NATS connection closed for good; stopping the decode loop")
			d.Abort(fmt.Errorf("%w: rank %d lost its NATS connection (reconnects exhausted)", rank.ErrAborted, cfg.Rank))
		case err := <-done:
			return peerLeft, err
		}
	}
}

// waitReform holds rank 0's open requests (answering their clients and
// status requests meanwhile) until every rank is back, then sets up the
// next epoch. cause is what ended the last one.
func (w *world) waitReform(ctx context.Context, cause error) error {
	cfg, log, notify := &w.r.a.cfg, w.r.log, w.r.a.o.notifier.Notify
	log.Warn("peer lost; waiting for the world to re-form", "err", cause, "requests_held", len(w.resume))
	notify("STATUS=waiting for the world to re-form after: " + cause.Error())
	hold, err := rank.NewHold(w.r.bus.Main, broadcast.Subjects{Prefix: cfg.Prefix, Job: cfg.Job}, w.r.a.Status(), w.resume)
	if err != nil {
		return fmt.Errorf("answer for the rank while the world re-forms: %w", err)
	}
	if err := w.reform(ctx); err != nil {
		if ctx.Err() != nil {
			hold.Fail(errors.New("rank 0 is shutting down"))
			return err
		}
		hold.Fail(fmt.Errorf("the world did not re-form: %w", err))
		return err
	}
	w.resume = hold.Close()
	notify(fmt.Sprintf("STATUS=world re-formed: epoch %d", w.epoch))
	return nil
}

// everyRankAnswers reports whether every member of present answers status
// on the bus for its rank (ranks between epochs answer too, in state
// reforming). Membership alone is not enough: it lists a member it merely
// suspects (frozen, partitioned) as present for seconds, and a world
// re-formed with it would lose it again at once, with requests accepted
// meanwhile.
func (w *world) everyRankAnswers(ctx context.Context, present []membership.Member) bool {
	cfg := &w.r.a.cfg
	sctx, cancel := context.WithTimeout(ctx, 2*cfg.HeartbeatInterval+500*time.Millisecond)
	defer cancel()
	st, _ := client.CollectStatus(sctx, w.r.bus.Main, broadcast.Subjects{Prefix: cfg.Prefix, Job: cfg.Job}, 2*cfg.HeartbeatInterval+500*time.Millisecond)
	seen := make([]bool, cfg.WorldSize)
	n := 0
	names := map[int]string{}
	for _, m := range present {
		names[m.Meta.Rank] = m.Name
	}
	for _, s := range st {
		if s.Rank >= 0 && s.Rank < cfg.WorldSize && !seen[s.Rank] && s.Job == cfg.Job && s.Member == names[s.Rank] {
			seen[s.Rank] = true
			n++
		}
	}
	if n < cfg.WorldSize {
		w.r.log.Info("waiting for every rank to answer on the bus before re-forming", "answered", n, "world_size", cfg.WorldSize)
	}
	return n == cfg.WorldSize
}

// reform waits until every rank is back. Rank 0 then starts the next
// epoch and advertises it; followers wait for rank 0's new epoch (or a
// new rank 0) and adopt it.
func (w *world) reform(ctx context.Context) error {
	cfg, log, cl := &w.r.a.cfg, w.r.log, w.r.cl
	cond := w.rank0Changed
	if cfg.Rank == 0 {
		cond = func(present []membership.Member) bool { return w.everyRankAnswers(ctx, present) }
	}
	members, err := cl.Reform(ctx, cond)
	if err != nil {
		return err
	}
	if cfg.Rank == 0 {
		w.epoch++
		port := 0
		if cfg.needsMasterPort() {
			if port, err = pickMasterPort(); err != nil {
				return err
			}
		}
		if err := cl.UpdateMeta(func(m *membership.Meta) { m.Epoch, m.MasterPort = w.epoch, port }, 5*time.Second); err != nil {
			log.Warn("epoch announcement not confirmed by every member", "epoch", w.epoch, "err", err)
		}
		log.Info("world re-formed", "epoch", w.epoch)
		return nil
	}
	if err := w.adopt(members); err != nil {
		return err
	}
	log.Info("world re-formed", "epoch", w.epoch, "leader", fmt.Sprintf("%08x", w.leader))
	return nil
}
