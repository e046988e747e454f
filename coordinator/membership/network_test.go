package membership

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tpcoord/tpcoord/internal/poll"
)

// TestNetworkCutAndRestart: members on an in-process Network form a world;
// a member cut off is reported failed (a packet to it is dropped, it does
// not block its sender), and a member restarted at the freed address
// rejoins.
func TestNetworkCutAndRestart(t *testing.T) {
	n := NewNetwork()
	var addrs []string
	onNet := func(addr string) func(*Config) {
		return func(c *Config) {
			tr, err := n.Transport(addr)
			if err != nil {
				t.Fatal(err)
			}
			c.Transport = tr
			addrs = append(addrs, tr.Addr())
		}
	}
	m0 := startWith(t, 0, nil, onNet(""))
	m1 := startWith(t, 1, []string{m0.Addr()}, onNet(""))
	m2 := startWith(t, 2, []string{m0.Addr()}, onNet(""))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, ch := range []<-chan result{rendezvous(ctx, m0), rendezvous(ctx, m1), rendezvous(ctx, m2)} {
		if r := <-ch; r.err != nil {
			t.Fatal(r.err)
		}
	}
	if _, err := n.Transport(m2.Addr()); err == nil {
		t.Fatal("a second transport took a live member's address")
	}

	n.Cut(m2.Addr(), true)
	select {
	case ev := <-m0.Events():
		if ev.Member.Meta.Rank != 2 || ev.Left {
			t.Fatalf("event %v, want rank 2 failed", ev)
		}
	case <-ctx.Done():
		t.Fatal("rank 0 never noticed rank 2 was cut off")
	}
	m2.hardStop(t) // frees the address, as the process exiting does
	n.Cut(m2.Addr(), false)

	m2b := startWith(t, 2, []string{m0.Addr()}, onNet(m2.Addr()), withStarted(time.Now().UnixNano()))
	r := <-rendezvous(ctx, m2b)
	if r.err != nil {
		t.Fatalf("restarted rank 2: %v", r.err)
	}
	poll.Until(t, 20*time.Second, "rank 0 sees the restarted rank 2", func() bool {
		for _, m := range m0.Members() {
			if m.Meta.Rank == 2 && m.Name == m2b.Name() {
				return true
			}
		}
		return false
	})
}

// TestExchangeErr: a state exchange that falls short without an error from
// memberlist is told plainly (it once printed "%!w(<nil>)").
func TestExchangeErr(t *testing.T) {
	if err := exchangeErr(2, 2, nil); err != nil {
		t.Fatalf("all reached: %v", err)
	}
	if err := exchangeErr(1, 2, nil); err == nil || err.Error() != "state exchange reached 1 of 2 members" {
		t.Fatalf("short without an error: %v", err)
	}
	cause := errors.New("dial tcp: refused")
	if err := exchangeErr(0, 2, cause); !errors.Is(err, cause) || strings.Contains(err.Error(), "%!") {
		t.Fatalf("short with an error: %v", err)
	}
}
