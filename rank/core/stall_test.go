package core

import (
	"testing"
	"time"
)

// TestFrozen: a heartbeat tick more than StallTicks intervals old means
// the process was frozen; a late tick within them, or no tick yet, does
// not.
func TestFrozen(t *testing.T) {
	const hb = 250 * time.Millisecond
	for _, c := range []struct {
		last time.Time
		now  time.Duration // after t0
		want bool
	}{
		{time.Time{}, time.Hour, false}, // no tick yet
		{t0, hb, false},
		{t0, StallTicks * hb, false},                 // late, not frozen
		{t0, StallTicks*hb + time.Millisecond, true}, // StallTicks×250 ms = the floor, 1 s
		{t0, 3 * time.Second, true},                  // SIGSTOPped for 3 s
	} {
		if got := Frozen(c.last, t0.Add(c.now), hb); got != c.want {
			t.Errorf("last tick %v, now t0+%v: frozen %v, want %v", c.last, c.now, got, c.want)
		}
	}
	// A short heartbeat (the tests' 20 ms) late by a loaded host's 500 ms
	// is not a freeze: the floor holds.
	const short = 20 * time.Millisecond
	for _, c := range []struct {
		last time.Time
		now  time.Duration
		want bool
	}{
		{t0, 500 * time.Millisecond, false},
		{t0, StallFloor, false},
		{t0, StallFloor + time.Millisecond, true},
	} {
		if got := Frozen(c.last, t0.Add(c.now), short); got != c.want {
			t.Errorf("last tick %v, now t0+%v: frozen %v, want %v", c.last, c.now, got, c.want)
		}
	}
	if Frozen(t0, t0.Add(time.Hour), 0) {
		t.Error("frozen with no heartbeat interval")
	}
}

// TestLeaderThawedGivesClientsTheirTimeout: after rank 0 was frozen for
// longer than the client timeout, the driver passes the thaw as Deaf; a
// client whose keepalives are still in rank 0's socket buffers is not
// cancelled at the first boundary after the thaw, and is once it stays
// silent a whole timeout from the thaw.
func TestLeaderThawedGivesClientsTheirTimeout(t *testing.T) {
	l := newLeader(4, 4)
	l.Step(t0, 1, 1, Input{Requests: []*Request{tagged("a", true)}})
	thaw := t0.Add(3 * time.Second) // frozen since t0: way past the timeout
	deaf := time.Time{}
	if Frozen(t0, thaw, 250*time.Millisecond) {
		deaf = thaw
	}
	if rd := l.Step(thaw, 1, 2, Input{Deaf: deaf}); len(rd.Ended) != 0 {
		t.Fatalf("ended %v at the first boundary after the thaw", tags(rd.Ended))
	}
	if rd := l.Step(thaw.Add(timeout+time.Second), 1, 3, Input{Deaf: deaf}); len(rd.Ended) != 1 {
		t.Fatalf("ended %v a whole timeout after the thaw, want [a]", tags(rd.Ended))
	}
}

// TestLate: a tick more than half an interval past its due time is late
// by the excess; on time, slightly late, or the first tick is not.
func TestLate(t *testing.T) {
	const hb = 250 * time.Millisecond
	for _, c := range []struct {
		last time.Time
		now  time.Duration
		want time.Duration
	}{
		{time.Time{}, time.Hour, 0},
		{t0, hb, 0},
		{t0, hb + hb/2, 0},
		{t0, hb + hb/2 + time.Millisecond, hb/2 + time.Millisecond},
		{t0, hb + 700*time.Millisecond, 700 * time.Millisecond},
	} {
		if got := Late(c.last, t0.Add(c.now), hb); got != c.want {
			t.Errorf("last %v, now t0+%v: late %v, want %v", c.last, c.now, got, c.want)
		}
	}
}
