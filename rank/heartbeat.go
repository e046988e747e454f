package rank

// Heartbeats: what a rank reports of itself, every DriverConfig.Heartbeat.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/rank/core"
)

func (d *Driver) setPhase(p broadcast.Phase) {
	d.mu.Lock()
	d.pos.phase = p
	d.mu.Unlock()
}

// publishState records the mirror's position for status and heartbeats.
func (d *Driver) publishState() {
	p := position{phase: broadcast.PhaseRunning, applied: d.mirror.Applied(), digest: d.mirror.Digest(), rows: len(d.mirror.Rows())}
	if d.l != nil {
		p.waiting = d.l.core.Waiting()
		if p.kv = d.l.core.Memory(); p.kv != nil {
			d.cfg.Metrics.kvCounts(p.kv)
		}
	} else {
		p.leader = d.f.following
	}
	d.mu.Lock()
	d.pos = p
	d.mu.Unlock()
}

func (d *Driver) sendHeartbeat() {
	d.mu.Lock()
	p := d.pos
	d.mu.Unlock()
	hb := broadcast.Heartbeat{Epoch: d.cfg.Epoch, Rank: uint32(d.cfg.Rank), Phase: p.phase, Applied: p.applied, Digest: p.digest, UnixNs: time.Now().UnixNano(), Leader: p.leader, KV: d.cfg.Capacity.wire()}
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
	d.mu.Lock()
	d.lastTick = time.Now()
	d.mu.Unlock()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			d.ticked(time.Now())
			d.sendHeartbeat()
			d.checkLiveness(d.cfg.Clock())
		}
	}
}

// ticked records a heartbeat tick at wall. A tick long overdue means this
// process was frozen (core.Frozen): nobody could be heard meanwhile, so
// as after a reconnect (checkLiveness) peers get the grace period again
// and clients' silence counts from now. A tick merely late (core.Late)
// takes its lateness off the peers' silence.
func (d *Driver) ticked(wall time.Time) {
	d.mu.Lock()
	frozen, gap := core.Frozen(d.lastTick, wall, d.cfg.Heartbeat), wall.Sub(d.lastTick)
	late := core.Late(d.lastTick, wall, d.cfg.Heartbeat)
	d.lastTick, d.lastLate = wall, late
	switch now := d.cfg.Clock(); {
	case frozen:
		d.deafAt = now
		d.peerTab.Restart(now)
	case late > 0:
		// Stalled for less: a CPU-starved host (a model's threads on
		// every core), a long GC. Peers' heartbeats may wait unread in
		// this process's connection; their silence counts without the
		// stall.
		d.peerTab.Discount(late, now)
	}
	d.mu.Unlock()
	if frozen {
		d.log.Warn("this process was frozen (its heartbeat ticker fell behind); clients and peers get their whole timeouts from now",
			"frozen_for", gap.Round(time.Millisecond), "heartbeat", d.cfg.Heartbeat)
	}
}

// thawed, at a step boundary, tells whether the process was frozen since
// the heartbeat loop's last tick, before that loop has had its tick (the
// decode loop may reach a boundary first after a SIGCONT): then clients'
// silence counts from now, before their keepalives buffered during the
// freeze are read. Called with mu held.
func (d *Driver) thawed() {
	if core.Frozen(d.lastTick, time.Now(), d.cfg.Heartbeat) {
		d.deafAt = d.cfg.Clock()
	}
}

// wire is c as heartbeats carry it (each figure saturates at 2^32-1,
// far past any real pool).
func (c KVCapacity) wire() broadcast.KVCapacity {
	u := func(n int) uint32 { return uint32(min(max(n, 0), math.MaxUint32)) }
	return broadcast.KVCapacity{BlockSize: u(c.BlockSize), Blocks: u(c.Blocks), MaxModelLen: u(c.MaxModelLen)}
}

// ErrCapacityMismatch stops a job whose ranks' workers report different
// KV caches.
var ErrCapacityMismatch = errors.New("the ranks' workers report different KV caches")

// checkCapacity, on rank 0, stops the job when follower rank's KV
// capacity differs from its own, naming every differing figure.
func (d *Driver) checkCapacity(rank uint32, kv broadcast.KVCapacity) {
	own := d.cfg.Capacity.wire()
	if kv == own {
		return
	}
	var diffs []string
	for _, f := range []struct {
		name        string
		mine, their uint32
	}{{"block size", own.BlockSize, kv.BlockSize}, {"blocks", own.Blocks, kv.Blocks}, {"max model len", own.MaxModelLen, kv.MaxModelLen}} {
		if f.mine != f.their {
			diffs = append(diffs, fmt.Sprintf("%s: rank 0 has %d, rank %d has %d", f.name, f.mine, rank, f.their))
		}
	}
	d.Abort(fmt.Errorf("%w (%s): every rank's worker must run the same model with the same --block-size and KV pool size (--kv-blocks at most the smallest pool makes rank 0 schedule that many)", ErrCapacityMismatch, strings.Join(diffs, "; ")))
}
