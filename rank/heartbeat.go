package rank

// Heartbeats: what a rank reports of itself, every DriverConfig.Heartbeat.

import (
	"context"
	"errors"
	"time"

	"github.com/tpcoord/tpcoord/broadcast"
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
