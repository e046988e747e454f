package rank

import (
	"fmt"
	"time"

	"github.com/tpcoord/tpcoord/rank/client"
)

// watched are the ranks whose heartbeats this rank checks: every follower
// on rank 0, rank 0 on a follower.
func (d *Driver) watched() []int {
	if d.cfg.Rank != 0 {
		return []int{0}
	}
	out := make([]int, 0, d.cfg.World-1)
	for r := 1; r < d.cfg.World; r++ {
		out = append(out, r)
	}
	return out
}

// startLiveness gives every watched rank LivenessGrace to be heard from.
func (d *Driver) startLiveness(now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.quiet = now
	for _, r := range d.watched() {
		d.heard[r] = now.Add(d.cfg.LivenessGrace - d.cfg.HeartbeatTimeout)
	}
}

// checkLiveness declares a watched rank lost when it has been silent for
// HeartbeatTimeout. While this rank's own connection is down nobody can be
// heard, so nobody is judged; once it is back, everyone gets the grace
// period again.
func (d *Driver) checkLiveness(now time.Time) {
	if d.cfg.HeartbeatTimeout <= 0 {
		return
	}
	if c, ok := d.tr.(interface{ Connected() bool }); ok && !c.Connected() {
		d.startLiveness(now)
		return
	}
	d.mu.Lock()
	lost, silent := -1, time.Duration(0)
	for _, r := range d.watched() {
		if s := now.Sub(d.heard[r]); s > d.cfg.HeartbeatTimeout && s > silent {
			lost, silent = r, s
		}
	}
	d.mu.Unlock()
	if lost >= 0 {
		d.log.Error("peer silent; declaring it lost", "lost_rank", lost, "silent", silent.Round(time.Millisecond))
		d.Abort(fmt.Errorf("%w: rank %d: no heartbeat for %v (heartbeat timeout %v)", ErrPeerLost, lost, silent.Round(time.Millisecond), d.cfg.HeartbeatTimeout))
	}
}

// peerStatus is rank 0's view of its followers for status replies.
func (d *Driver) peerStatus(now time.Time) []client.PeerStatus {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]client.PeerStatus, 0, d.cfg.World-1)
	for r := 1; r < d.cfg.World; r++ {
		ps := client.PeerStatus{Rank: r, HeartbeatAgeMs: -1, State: "unknown"}
		if hb, ok := d.peers[r]; ok {
			ps.Epoch, ps.Step, ps.State = hb.Epoch, hb.Applied, hb.Phase.String()
			ps.HeartbeatAgeMs = ms(now.Sub(d.heard[r]))
		}
		out = append(out, ps)
	}
	return out
}
