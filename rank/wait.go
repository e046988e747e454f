package rank

import (
	"context"
	"time"
)

// timerGrain is how late a Go timer may fire in a process whose threads
// are all idle: the runtime then waits for it in epoll_wait, whose timeout
// is whole milliseconds, so the sub-millisecond rest of a wait is rounded
// up to a full one.
const timerGrain = time.Millisecond

// WaitUntil returns at deadline, or with ctx's error if ctx is done before
// the last millisecond (or was already when called). It is how the
// stand-in executors spend a forward pass's time. A plain timer overshoots
// by up to timerGrain (a 20 ms wait took 20.3 ms at the median on the
// 2-vCPU test VM), which is an error in the stand-in, not a cost of the
// coordinator: the timer covers all but the last timerGrain and a
// nanosleep the rest (on Linux with the thread's timer slack at 1 ns, so
// the kernel wakes it on time; the context is not watched for that last
// millisecond).
func WaitUntil(ctx context.Context, deadline time.Time) error {
	if wait := time.Until(deadline) - timerGrain; wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	sleepPrecise(time.Until(deadline))
	return nil
}
