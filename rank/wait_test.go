package rank

import (
	"testing"
	"time"
)

// TestLatenessMargin: the margin follows a steady lateness (mean plus
// twice a deviation that decays to nothing), widens when the lateness
// varies, never exceeds maxSpin, and a fresh estimate does not spin.
func TestLatenessMargin(t *testing.T) {
	var l lateness
	if m := l.margin(); m != 0 {
		t.Fatalf("fresh margin = %v, want 0", m)
	}
	for range 200 {
		l.observe(70 * time.Microsecond)
	}
	if m := l.margin(); m < 69*time.Microsecond || m > 71*time.Microsecond {
		t.Errorf("margin after a steady 70µs = %v, want 70µs ± 1µs", m)
	}
	steady := l.margin()
	for i := range 200 {
		l.observe(time.Duration(50+40*(i%2)) * time.Microsecond) // 50, 90: mean 70, deviation 20
	}
	if m := l.margin(); m <= steady+20*time.Microsecond {
		t.Errorf("margin with a ±20µs lateness = %v, want above %v", m, steady+20*time.Microsecond)
	}
	for range 50 {
		l.observe(10 * time.Millisecond)
	}
	if m := l.margin(); m != maxSpin {
		t.Errorf("margin after 10ms sleeps = %v, want the cap %v", m, maxSpin)
	}
}

// TestWaitUntilAfterLateSleeps: with a margin at its cap, WaitUntil still
// returns at or after its deadline (the spin covers the rest).
func TestWaitUntilAfterLateSleeps(t *testing.T) {
	mean, dev := wakeLate.mean.Load(), wakeLate.dev.Load()
	defer func() { wakeLate.mean.Store(mean); wakeLate.dev.Store(dev) }()
	wakeLate.mean.Store(int64(maxSpin))
	for _, d := range []time.Duration{100 * time.Microsecond, 2 * time.Millisecond} {
		deadline := time.Now().Add(d)
		wakeLate.finish(deadline)
		if early := time.Until(deadline); early > 0 {
			t.Errorf("finish(+%v) returned %v before its deadline", d, early)
		}
	}
}
