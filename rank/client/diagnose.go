package client

import (
	"fmt"
	"time"

	"github.com/tpcoord/tpcoord/broadcast/api"
)

// RankView is one rank as a status poll shows it: what it answered (nil if
// it did not), when rank 0 last heard its heartbeat, and what looks wrong.
type RankView struct {
	Rank           int
	Status         *api.RankStatus
	HeartbeatAgeMs float64 // -1: rank 0 never heard it, or no rank 0 answered
	Note           string  // e.g. "STUCK? in forward for 12s", "" when all is well
}

// stuckPhaseMs is how long a rank may stay in a working phase before it is
// flagged. Waiting (idle, await) is normal without traffic, and a rank 0
// awaiting its followers names the slow follower in its log.
const stuckPhaseMs = 5000

// Diagnose lays out the ranks 0..world-1 that answered a status poll
// (CollectStatus), world taken from the replies and bounded by maxWorld,
// and notes what is wrong with each: no answer (MISSING), a phase held too
// long or no heartbeat (STUCK?), steps behind rank 0 (BEHIND), a digest
// that differs from rank 0's at the same step.
func Diagnose(ranks []api.RankStatus, maxWorld int) []RankView {
	world := 0
	answered := map[int]*api.RankStatus{}
	for i := range ranks {
		world = max(world, ranks[i].World)
		answered[ranks[i].Rank] = &ranks[i]
	}
	leader := answered[0]
	seenBy0 := map[int]api.PeerStatus{}
	if leader != nil {
		for _, p := range leader.Peers {
			seenBy0[p.Rank] = p
		}
	}
	out := make([]RankView, 0, min(world, maxWorld))
	for i := 0; i < min(world, maxWorld); i++ {
		v := RankView{Rank: i, Status: answered[i], HeartbeatAgeMs: -1}
		p, known := seenBy0[i]
		if known {
			v.HeartbeatAgeMs = p.HeartbeatAgeMs
		}
		v.Note = note(v, leader, p, known)
		out = append(out, v)
	}
	return out
}

func note(v RankView, leader *api.RankStatus, p api.PeerStatus, known bool) string {
	r := v.Status
	switch {
	case r == nil && known && p.HeartbeatAgeMs >= 0:
		return fmt.Sprintf("MISSING: no status answer; rank 0 last saw step %d", p.Step)
	case r == nil:
		return "MISSING: no status answer"
	case stuckInPhase(r):
		return fmt.Sprintf("STUCK? in %s for %s", r.Phase, PhaseTime(r.PhaseMs))
	case known && p.HeartbeatAgeMs > 1000:
		return "STUCK? no heartbeat for over 1s"
	case leader != nil && r.Epoch == leader.Epoch && r.Step+3 < leader.Step:
		return fmt.Sprintf("BEHIND rank 0 by %d steps", leader.Step-r.Step)
	case leader != nil && r.Epoch == leader.Epoch && r.Digest != leader.Digest && r.Step == leader.Step:
		return "DIGEST DIFFERS from rank 0"
	}
	return ""
}

func stuckInPhase(r *api.RankStatus) bool {
	switch r.Phase {
	case "publish", "forward", "sample", "reply":
		return r.State == "running" && r.PhaseMs > stuckPhaseMs
	case "await": // rank 0 with work, held back by a follower
		return r.Rank == 0 && r.State == "running" && r.Rows > 0 && r.PhaseMs > stuckPhaseMs
	}
	return false
}

// PhaseTime renders a time in a phase, rounded to the millisecond.
func PhaseTime(ms float64) string {
	return time.Duration(ms * float64(time.Millisecond)).Round(time.Millisecond).String()
}

// NoisePool is a sampling rank's noise pool as its status counters
// (RankStatus.Sampler) tell it: whether its producers keep up. A row the
// sampler could not take for want of a free slot it made inline, so it
// counts in Taken and Inline both.
type NoisePool struct {
	Form      string // "exact" (Gumbel values) or "bound" (upper bounds)
	Producers uint64
	Taken     uint64 // rows the sampler needed: taken from the pool or made inline
	Inline    uint64 // rows made on the step's critical path: 0 when the producers keep up
	NoSlot    uint64 // of Inline, those made for want of a free slot
	Ready     uint64 // rows produced and waiting
}

// NoiseOf reads the noise pool of a rank's sampler counters; nil if it
// reports none (a follower, or a rank 0 without a pool).
func NoiseOf(s map[string]uint64) *NoisePool {
	if s == nil {
		return nil
	}
	form := "exact"
	if s["noise_bound_rows"] == 1 {
		form = "bound"
	}
	return &NoisePool{Form: form, Producers: s["noise_producers"], Taken: s["noise_rows_taken"] + s["noise_take_errors"],
		Inline: s["noise_rows_inline"] + s["noise_take_errors"], NoSlot: s["noise_take_errors"], Ready: s["noise_rows_ready"]}
}
