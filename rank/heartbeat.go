package rank

// Heartbeats: what a rank reports of itself, every DriverConfig.Heartbeat.

import (
	"context"
	"errors"
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
			d.cfg.Metrics.preempted(p.kv.Preemptions)
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
// and clients' silence counts from now.
func (d *Driver) ticked(wall time.Time) {
	d.mu.Lock()
	frozen, gap := core.Frozen(d.lastTick, wall, d.cfg.Heartbeat), wall.Sub(d.lastTick)
	d.lastTick = wall
	if frozen {
		now := d.cfg.Clock()
		d.deafAt = now
		d.peerTab.Restart(now)
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
