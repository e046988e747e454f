package rank

import (
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// sleepPrecise blocks the calling thread in nanosleep for d (d ≤ 0 returns
// at once), resuming after a signal. The thread's timer slack, by which
// the kernel may delay the wake-up to batch it with others (50 µs by
// default), is set to 1 ns for the sleep and restored after it.
func sleepPrecise(d time.Duration) {
	if d <= 0 {
		return
	}
	runtime.LockOSThread() // the slack is the thread's
	defer runtime.UnlockOSThread()
	if slack, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0); err == nil && slack > 1 {
		if unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0) == nil {
			defer func() { _ = unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(slack), 0, 0, 0) }()
		}
	}
	ts := syscall.NsecToTimespec(int64(d))
	for {
		// On EINTR, ts holds the time left.
		if err := syscall.Nanosleep(&ts, &ts); err != syscall.EINTR {
			return
		}
	}
}
