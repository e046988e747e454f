package rank

import (
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestSleepPreciseRestoresSlack: the thread's timer slack is its own
// again after a precise sleep (set to 1 ns only for the sleep).
func TestSleepPreciseRestoresSlack(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
	if err != nil {
		t.Skipf("PR_GET_TIMERSLACK: %v", err)
	}
	start := time.Now()
	sleepPrecise(200 * time.Microsecond)
	if d := time.Since(start); d < 200*time.Microsecond {
		t.Errorf("slept %v, want at least 200µs", d)
	}
	after, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
	if err != nil || after != before {
		t.Errorf("timer slack %d after the sleep (%v), want %d as before", after, err, before)
	}
}
