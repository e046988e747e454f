package rank

import (
	"syscall"
	"time"
)

// sleepPrecise blocks the calling thread in nanosleep for d (d ≤ 0 returns
// at once), resuming after a signal.
func sleepPrecise(d time.Duration) {
	if d <= 0 {
		return
	}
	ts := syscall.NsecToTimespec(int64(d))
	for syscall.Nanosleep(&ts, &ts) == syscall.EINTR {
	}
}
