package membership

import (
	"testing"
	"time"
)

// TestGossipProgressPostponesTheStateExchange: once joined, a missing rank
// that arrives by gossip resets the wait before the next state exchange to
// the quiet time (and the backoff with it); no arrival, or no rank left
// missing, leaves both alone.
func TestGossipProgressPostponesTheStateExchange(t *testing.T) {
	c := &Cluster{cfg: Config{Join: []string{"127.0.0.1:1"}}, quiet: time.Millisecond, refusals: map[string]bool{}}
	c.didJoin = true
	f := &formation{backoff: 2 * time.Second, retry: time.NewTimer(time.Hour), missing: -1}
	defer f.retry.Stop()

	c.gossipProgress(f, 5) // the first look: nothing arrived yet
	c.gossipProgress(f, 5) // no arrival
	if f.backoff != 2*time.Second || f.missing != 5 {
		t.Fatalf("without an arrival: backoff %v, missing %d; want 2s, 5", f.backoff, f.missing)
	}
	c.gossipProgress(f, 3)
	if f.backoff != c.quiet || f.missing != 3 {
		t.Fatalf("after an arrival: backoff %v, missing %d; want %v, 3", f.backoff, f.missing, c.quiet)
	}
	select {
	case <-f.retry.C: // reset from an hour to c.quiet
	case <-time.After(time.Minute):
		t.Fatal("the state exchange was not brought forward")
	}

	f.backoff = 2 * time.Second
	c.gossipProgress(f, 0) // the last rank arrived: the world forms, no exchange
	if f.backoff != 2*time.Second {
		t.Errorf("with no rank missing the backoff was reset to %v", f.backoff)
	}

	c.didJoin = false // not joined yet: the timer is the join's retry
	f.missing = 4
	c.gossipProgress(f, 2)
	if f.backoff != 2*time.Second {
		t.Errorf("before the join the backoff was reset to %v", f.backoff)
	}
}
