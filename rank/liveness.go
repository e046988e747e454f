package rank

import (
	"fmt"
	"time"
)

// checkLiveness declares a watched rank lost when it has been silent for
// HeartbeatTimeout. While this rank's own connection is down nobody can be
// heard, so nobody is judged; once it is back, everyone gets the grace
// period again, and clients' silence counts from then (deafAt).
func (d *Driver) checkLiveness(now time.Time) {
	connected := true
	if c, ok := d.tr.(interface{ Connected() bool }); ok {
		connected = c.Connected()
	}
	d.mu.Lock()
	if !connected {
		d.peerTab.Restart(now)
		d.deafAt = now
		d.mu.Unlock()
		return
	}
	lost, silent := d.peerTab.Silent(now)
	late := d.lastLate
	d.mu.Unlock()
	if d.cfg.HeartbeatTimeout <= 0 {
		return
	}
	if lost >= 0 {
		// own_tick_late tells a peer's silence from this process's own
		// stall, already taken off (0: this process ran on time).
		d.log.Error("peer silent; declaring it lost", "lost_rank", lost, "silent", silent.Round(time.Millisecond), "own_tick_late", late.Round(time.Millisecond))
		d.Abort(fmt.Errorf("%w: rank %d: no heartbeat for %v (heartbeat timeout %v)", ErrPeerLost, lost, silent.Round(time.Millisecond), d.cfg.HeartbeatTimeout))
	}
}
