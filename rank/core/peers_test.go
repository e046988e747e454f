package core

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tpcoord/tpcoord/broadcast"
)

// TestPeerTableLiveness: time enters only as arguments, so the decisions
// are tested at exact instants. A watched rank gets the grace period
// after a (re)start, then is lost once silent beyond the timeout.
func TestPeerTableLiveness(t *testing.T) {
	t0 := time.Unix(1000, 0)
	p := NewPeers(0, 3, 0, time.Second, 10*time.Second)
	p.Restart(t0)
	if r, _ := p.Silent(t0.Add(10 * time.Second)); r != -1 {
		t.Fatalf("rank %d lost within the grace period", r)
	}
	if r, s := p.Silent(t0.Add(10*time.Second + time.Millisecond)); r == -1 || s != time.Second+time.Millisecond {
		t.Fatalf("silent = %d, %v after the grace period; want a rank silent 1.001s", r, s)
	}
	hb := broadcast.Heartbeat{Rank: 1, Applied: 4}
	p.HeardFrom(1, &hb, t0.Add(11*time.Second))
	p.HeardFrom(2, nil, t0.Add(11500*time.Millisecond))
	if r, _ := p.Silent(t0.Add(12 * time.Second)); r != -1 {
		t.Fatalf("rank %d lost though heard within the timeout", r)
	}
	if r, s := p.Silent(t0.Add(12200 * time.Millisecond)); r != 1 || s != 1200*time.Millisecond {
		t.Fatalf("silent = %d, %v; want rank 1, the one silent longest, 1.2s", r, s)
	}
	p.Restart(t0.Add(20 * time.Second)) // our own connection came back
	if r, _ := p.Silent(t0.Add(25 * time.Second)); r != -1 {
		t.Fatalf("rank %d judged during the grace after a reconnect", r)
	}
	if r, _ := NewPeers(0, 3, 0, 0, time.Second).Silent(t0.Add(time.Hour)); r != -1 {
		t.Fatal("a zero timeout declared a rank lost")
	}
	p.HeardFrom(2, &broadcast.Heartbeat{Rank: 2, Phase: broadcast.PhaseStopping}, t0.Add(30*time.Second))
	if r, _ := p.Silent(t0.Add(time.Hour)); r != 1 {
		t.Fatalf("silent = %d; want rank 1: rank 2 said goodbye and is not judged", r)
	}
	f := NewPeers(2, 3, 0, time.Second, time.Second)
	if w := f.Watched(); len(w) != 1 || w[0] != 0 {
		t.Fatalf("a follower watches %v, want rank 0", w)
	}
}

func TestPeerTableFlowControlAndDigests(t *testing.T) {
	t0 := time.Unix(1000, 0)
	p := NewPeers(0, 3, 2, time.Second, time.Second)
	if r, why := p.Slowest(0); r != 1 || !strings.Contains(why, "no heartbeat") {
		t.Fatalf("slowest = %d %q before any heartbeat", r, why)
	}
	p.HeardFrom(1, &broadcast.Heartbeat{Rank: 1, Epoch: 2, Applied: 7, Digest: 70}, t0)
	p.HeardFrom(2, &broadcast.Heartbeat{Rank: 2, Epoch: 1, Applied: 9, Digest: 90}, t0)
	if r, why := p.Slowest(5); r != 2 || !strings.Contains(why, "this epoch") {
		t.Fatalf("slowest = %d %q; want rank 2, still in an older epoch", r, why)
	}
	p.HeardFrom(2, &broadcast.Heartbeat{Rank: 2, Epoch: 2, Applied: 5, Digest: 50}, t0)
	if r, why := p.Slowest(6); r != 2 || why != "applied step 5, need 6" {
		t.Fatalf("slowest = %d %q", r, why)
	}
	if r, _ := p.Slowest(5); r != -1 {
		t.Fatalf("rank %d slow though every follower applied step 5", r)
	}
	if n := p.Present(t0.Add(time.Second), time.Second); n != 2 {
		t.Fatalf("present = %d, want 2", n)
	}
	p.RecordDigest(5, 50)
	p.RecordDigest(7, 70)
	if err := p.Diverged(); err != nil {
		t.Fatalf("equal digests: %v", err)
	}
	p.RecordDigest(7, 71)
	err := p.Diverged()
	if !errors.Is(err, ErrAborted) || !strings.Contains(err.Error(), "rank 1 diverged at step 7") {
		t.Fatalf("diverged = %v, want rank 1 named", err)
	}
	p.RecordDigest(7, 70)
	p.HeardFrom(1, &broadcast.Heartbeat{Rank: 1, Epoch: 2, Applied: 8, Digest: 80}, t0)
	if err := p.Diverged(); !errors.Is(err, ErrAborted) || !strings.Contains(err.Error(), "rank 1 diverged: it reports step 8, but rank 0 has published steps up to 7") {
		t.Fatalf("a follower ahead of rank 0: %v, want it named as diverged", err)
	}
	p.HeardFrom(1, &broadcast.Heartbeat{Rank: 1, Epoch: 2, Applied: 7, Digest: 70}, t0)
	p.RecordDigest(7+digestRing, 1) // step 7 forgotten: nothing to compare
	if err := p.Diverged(); err != nil {
		t.Fatalf("compared against a forgotten step: %v", err)
	}
}

// TestPeerTableDiscount: silence that was this rank's own stall is taken
// off a peer's, up to now: a peer heard 0.9 s ago by a rank that stalled
// for 0.5 s of it is not lost at 1.2 s, but is once silent a second of
// this rank's running time.
func TestPeerTableDiscount(t *testing.T) {
	t0 := time.Unix(1000, 0)
	p := NewPeers(0, 2, 0, time.Second, time.Second)
	p.HeardFrom(1, nil, t0)
	p.Discount(500*time.Millisecond, t0.Add(900*time.Millisecond))
	if r, _ := p.Silent(t0.Add(1200 * time.Millisecond)); r != -1 {
		t.Fatalf("rank %d lost after 1.2 s of which 0.5 s was our own stall", r)
	}
	if r, s := p.Silent(t0.Add(1501 * time.Millisecond)); r != 1 || s != 1001*time.Millisecond {
		t.Fatalf("silent = %d, %v; want rank 1 silent 1.001 s of our running time", r, s)
	}
	p.Discount(time.Hour, t0.Add(2*time.Second))
	if r, s := p.Silent(t0.Add(3001 * time.Millisecond)); r != 1 || s != 1001*time.Millisecond {
		t.Fatalf("silent = %d, %v; a discount past now must credit up to now only", r, s)
	}
	// A rank within its grace after a restart keeps the whole grace.
	g := NewPeers(0, 2, 0, time.Second, 10*time.Second)
	g.Restart(t0)
	g.Discount(500*time.Millisecond, t0.Add(time.Second))
	if r, s := g.Silent(t0.Add(9 * time.Second)); r != -1 {
		t.Fatalf("rank %d lost %v into a 10 s grace after a late tick", r, s)
	}
}
