package core

import (
	"fmt"
	"time"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/broadcast/api"
)

// Peers is what one rank knows of the ranks it watches (every follower
// on rank 0, rank 0 on a follower), and the decisions taken from it: which
// rank has been silent too long (liveness), which follower is behind (rank
// 0's flow control), and which follower diverged (rank 0's digest check).
// It does no I/O and reads no clock: time comes in as arguments, so its
// tests need no sleeps. The driver guards it with its mutex.
type Peers struct {
	self, world int
	epoch       uint32
	timeout     time.Duration // silence that declares a rank lost (0: never)
	grace       time.Duration // silence allowed after a (re)start
	last        map[int]broadcast.Heartbeat
	heard       map[int]time.Time
	// digests are rank 0's own digests at its recent steps; applied is
	// its last step.
	digests [digestRing]struct{ step, digest uint64 }
	applied uint64
}

const digestRing = 1024

// NewPeers returns the table of rank self in a world of world ranks in
// epoch: silence longer than timeout loses a rank (0: never), grace is
// the silence allowed after a (re)start.
func NewPeers(self, world int, epoch uint32, timeout, grace time.Duration) *Peers {
	return &Peers{self: self, world: world, epoch: epoch, timeout: timeout, grace: grace,
		last: map[int]broadcast.Heartbeat{}, heard: map[int]time.Time{}}
}

// Watched are the ranks this rank checks.
func (p *Peers) Watched() []int {
	if p.self != 0 {
		return []int{0}
	}
	out := make([]int, 0, p.world-1)
	for r := 1; r < p.world; r++ {
		out = append(out, r)
	}
	return out
}

// Restart gives every watched rank the grace period to be heard from, as
// at start or when this rank's own connection comes back: while it was
// down nobody could be heard.
func (p *Peers) Restart(now time.Time) {
	for _, r := range p.Watched() {
		p.heard[r] = now.Add(p.grace - p.timeout)
	}
}

// Discount credits every watched rank with d of silence that was this
// rank's own: it was not running for d (its heartbeat ticker came late),
// so it could not hear them meanwhile, and a heartbeat waiting unread
// must not make a peer look silent. Nobody is credited beyond now, and a
// rank still within its grace (heard set in the future by Restart) keeps
// it.
func (p *Peers) Discount(d time.Duration, now time.Time) {
	for _, r := range p.Watched() {
		h, ok := p.heard[r]
		if !ok || !h.Before(now) {
			continue
		}
		if h = h.Add(d); h.After(now) {
			h = now
		}
		p.heard[r] = h
	}
}

// HeardFrom records a sign of life from rank r at now; hb, if not nil, is
// what it reported.
func (p *Peers) HeardFrom(r int, hb *broadcast.Heartbeat, now time.Time) {
	p.heard[r] = now
	if hb != nil {
		p.last[r] = *hb
	}
}

// Silent returns the watched rank silent longest beyond the timeout, and
// for how long; -1 if none. A rank that said it is stopping is not judged.
func (p *Peers) Silent(now time.Time) (int, time.Duration) {
	lost, longest := -1, time.Duration(0)
	if p.timeout <= 0 {
		return lost, 0
	}
	for _, r := range p.Watched() {
		if p.Stopping(r) {
			continue // it said goodbye: its silence is expected
		}
		if s := now.Sub(p.heard[r]); s > p.timeout && s > longest {
			lost, longest = r, s
		}
	}
	return lost, longest
}

// Stopping reports whether rank r's last heartbeat said it is stopping on
// purpose (its agent was asked to stop), rather than running or aborted.
func (p *Peers) Stopping(r int) bool {
	hb, ok := p.last[r]
	return ok && hb.Phase == broadcast.PhaseStopping
}

// Slowest returns a follower that has not applied step need in this
// epoch, and why; -1 if every one has.
func (p *Peers) Slowest(need int64) (int, string) {
	for r := 1; r < p.world; r++ {
		hb, ok := p.last[r]
		switch {
		case !ok || hb.Epoch != p.epoch:
			return r, "no heartbeat in this epoch yet"
		case int64(hb.Applied) < need:
			return r, fmt.Sprintf("applied step %d, need %d", hb.Applied, need)
		}
	}
	return -1, ""
}

// RecordDigest notes rank 0's digest after its step k.
func (p *Peers) RecordDigest(k, digest uint64) {
	p.digests[k%digestRing] = struct{ step, digest uint64 }{k, digest}
	p.applied = max(p.applied, k)
}

// Diverged compares every follower's last reported digest with rank 0's at
// the same step (if rank 0 still remembers it). A follower reporting a
// step rank 0 has not published applied a step from someone else.
func (p *Peers) Diverged() error {
	for r, hb := range p.last {
		if hb.Epoch != p.epoch || hb.Applied == 0 {
			continue
		}
		if hb.Applied > p.applied {
			return fmt.Errorf("%w: rank %d diverged: it reports step %d, but rank 0 has published steps up to %d only (it applied a step rank 0 never published)", ErrAborted, r, hb.Applied, p.applied)
		}
		e := p.digests[hb.Applied%digestRing]
		if e.step == hb.Applied && e.digest != hb.Digest {
			return fmt.Errorf("%w: rank %d diverged at step %d: digest %016x, rank 0 has %016x", ErrAborted, r, hb.Applied, hb.Digest, e.digest)
		}
	}
	return nil
}

// Present counts the followers heard in this epoch within window of now.
func (p *Peers) Present(now time.Time, window time.Duration) int {
	n := 0
	for r, hb := range p.last {
		if hb.Epoch == p.epoch && now.Sub(p.heard[r]) <= window {
			n++
		}
	}
	return n
}

// Status is rank 0's view of its followers for status replies.
func (p *Peers) Status(now time.Time) []api.PeerStatus {
	out := make([]api.PeerStatus, 0, p.world-1)
	for r := 1; r < p.world; r++ {
		ps := api.PeerStatus{Rank: r, HeartbeatAgeMs: -1, State: "unknown"}
		if hb, ok := p.last[r]; ok {
			ps.Epoch, ps.Step, ps.State = hb.Epoch, hb.Applied, hb.Phase.String()
			ps.HeartbeatAgeMs = ms(now.Sub(p.heard[r]))
		}
		out = append(out, ps)
	}
	return out
}

// Heard is when rank r was last heard from (or the grace period's
// reference point after a restart); zero if never.
func (p *Peers) Heard(r int) time.Time { return p.heard[r] }
