package rank

import (
	"context"
	"sync/atomic"
	"time"
)

// timerGrain is how late a Go timer may fire in a process whose threads
// are all idle: the runtime then waits for it in epoll_wait, whose timeout
// is whole milliseconds, so the sub-millisecond rest of a wait is rounded
// up to a full one.
const timerGrain = time.Millisecond

// WaitUntil returns at deadline, or with ctx's error if ctx is done before
// the last millisecond (or was already when called). It is how the
// stand-in executors spend a forward pass's time, and it is meant to end
// on time: a late return is an error of the stand-in that would be
// charged to the coordinator. A plain timer overshoots by up to
// timerGrain (a 20 ms wait took 20.3 ms at the median on the 2-vCPU test
// VM), so the timer covers all but the last timerGrain, a nanosleep most
// of the rest (on Linux with the thread's timer slack at 1 ns), and a spin
// the last stretch, as long as the host's sleeps turn out to overshoot
// (see finish). The context is not watched for the last millisecond.
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
	wakeLate.finish(deadline)
	return nil
}

// maxSpin bounds the stretch of a wait spent spinning, whatever the
// sleeps' lateness: it is CPU taken from the other processes of the host.
const maxSpin = 250 * time.Microsecond

// wakeLate is this process's estimate of how late a nanosleep wakes up.
// With a 1 ns timer slack that is a few microseconds on bare metal; on the
// nested-virtualisation test VM it was 60–70 µs at the median and about
// 100 µs at the 90th percentile, on an idle host.
var wakeLate lateness

// lateness estimates a sleep's overshoot: an exponentially weighted mean
// and mean absolute deviation, in nanoseconds, updated by every sleep of
// every waiter (the lateness is the host's, not the waiter's).
type lateness struct {
	mean, dev atomic.Int64
}

// margin is how long before a deadline to stop sleeping: the mean
// lateness plus twice its deviation, at most maxSpin.
func (l *lateness) margin() time.Duration {
	return min(time.Duration(l.mean.Load()+2*l.dev.Load()), maxSpin)
}

// observe folds one sleep's lateness into the estimate (weight 1/8; the
// updates of concurrent waiters may overwrite each other, which only
// drops a sample).
func (l *lateness) observe(late time.Duration) {
	m, d := l.mean.Load(), l.dev.Load()
	e := int64(late) - m
	l.mean.Store(m + e/8)
	l.dev.Store(d + (abs(e)-d)/8)
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// finish sleeps until margin() before deadline, records how late that
// sleep woke, and spins through what is left.
func (l *lateness) finish(deadline time.Time) {
	target := deadline.Add(-l.margin())
	if d := time.Until(target); d > 0 {
		sleepPrecise(d)
		l.observe(time.Since(target))
	}
	for time.Now().Before(deadline) {
	}
}
