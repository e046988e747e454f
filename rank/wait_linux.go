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
	for {
		// On EINTR, ts holds the time left.
		if err := syscall.Nanosleep(&ts, &ts); err != syscall.EINTR {
			return
		}
	}
}
