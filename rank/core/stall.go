package core

import "time"

// StallTicks is how many of its intervals a process's heartbeat ticker
// may fall behind before the process counts as having been frozen, and
// StallFloor the shortest stall that counts: a loaded host delays a
// ticker of a few milliseconds (the tests' heartbeats) by more than four
// of them without anything being frozen.
const (
	StallTicks = 4
	StallFloor = time.Second
)

// Frozen reports whether the process whose heartbeat ticker ticks every
// interval, and last ticked at last, has been frozen until now (SIGSTOP, a
// suspended VM or container, a machine that slept): its last tick is more
// than StallTicks intervals, and StallFloor, old. The ticker runs on a goroutine of its
// own, which a long forward pass or a busy decode loop does not hold up;
// only the whole process stopping does. While it was frozen this rank
// heard nobody, so nobody's silence may be held against them: the driver
// then counts clients' and peers' silence from now, as after its own
// connection came back. A zero last (no tick yet) is not frozen.
func Frozen(last, now time.Time, interval time.Duration) bool {
	return !last.IsZero() && interval > 0 && now.Sub(last) > max(StallTicks*interval, StallFloor)
}

// Late is how long past its due time a tick every interval, whose last
// came at last, came at now: 0 when on time or within half an interval
// (a loaded host's ordinary delay), and for the first tick. A process
// whose ticker came late was not running meanwhile, or not enough to run
// it; the driver does not hold that time against its peers
// (Peers.Discount). A stall past Frozen's bound counts as a freeze
// instead.
func Late(last, now time.Time, interval time.Duration) time.Duration {
	if last.IsZero() || interval <= 0 {
		return 0
	}
	if late := now.Sub(last) - interval; late > interval/2 {
		return late
	}
	return 0
}
