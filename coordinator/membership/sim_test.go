package membership

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

// simRanksEnv sets the world size of TestSimulatedWorld: the suite runs a
// small world so that it stays fast under -race; docs/benchmarks.md's
// Scale section runs it with 256.
const simRanksEnv = "TPC_SIM_RANKS"

// simRanks is the simulated world's size: simRanksEnv, else 32.
func simRanks(t *testing.T) int {
	t.Helper()
	s := os.Getenv(simRanksEnv)
	if s == "" {
		return 32
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 3 || n > 4096 {
		t.Fatalf("%s=%q: want a world size in [3, 4096]", simRanksEnv, s)
	}
	return n
}

// TestSimulatedWorld forms a world of simRanks members on an in-process
// Network with the --local gossip settings (what launch gives its ranks),
// stops one member as a crash does (no leave, its address refuses dials),
// and checks that every other member reports it failed and nobody else.
// It logs the figures docs/benchmarks.md quotes: time to form, time to
// detect the loss (p50/p99/max over the members), goroutines and heap.
func TestSimulatedWorld(t *testing.T) {
	n := simRanks(t)
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	goroutines := runtime.NumGoroutine()

	start := time.Now()
	members := startSimWorld(t, n)
	formSimWorld(t, members)
	formed := time.Since(start)

	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	perMember := (int64(after.HeapInuse) - int64(before.HeapInuse)) / int64(n)
	t.Logf("%d members formed in %v; %d goroutines (%d per member), heap in use %d MiB (%d KiB per member), Sys %d MiB",
		n, formed.Round(time.Millisecond), runtime.NumGoroutine()-goroutines, (runtime.NumGoroutine()-goroutines)/n,
		(after.HeapInuse-before.HeapInuse)>>20, perMember>>10, after.Sys>>20)

	victim := n / 2
	stopped := time.Now()
	if err := members[victim].ml.Shutdown(); err != nil {
		t.Fatalf("stop rank %d: %v", victim, err)
	}
	took := detectLoss(t, members, victim, stopped)
	t.Logf("rank %d stopped: %d members saw it fail; detect p50 %v, p99 %v, max %v",
		victim, len(took), pct(took, 50), pct(took, 99), pct(took, 100))
}

// startSimWorld starts members of ranks 0..n-1 on a new Network, every one
// joining rank 0, and stops them all (without leaving: n² state exchanges)
// at the end of the test.
func startSimWorld(t *testing.T, n int) []*Cluster {
	t.Helper()
	net := NewNetwork()
	members := make([]*Cluster, 0, n)
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for _, m := range members {
			wg.Go(func() { _ = m.ml.Shutdown() })
		}
		wg.Wait()
	})
	var join []string
	for r := range n {
		tr, err := net.Transport("")
		if err != nil {
			t.Fatal(err)
		}
		c, err := Start(Config{
			Meta:      Meta{Job: testJob, Rank: r, World: n, Digest: "cfg-1", NATS: "nats://127.0.0.1:4222", Version: "test"},
			Transport: tr, Join: join, Local: true,
		})
		if err != nil {
			t.Fatalf("start rank %d: %v", r, err)
		}
		members = append(members, c)
		if r == 0 {
			join = []string{c.Addr()}
		}
	}
	return members
}

// formSimWorld runs every member's Rendezvous at once and checks that each
// saw the whole world.
func formSimWorld(t *testing.T, members []*Cluster) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	errs := make([]error, len(members))
	var wg sync.WaitGroup
	for i, m := range members {
		wg.Go(func() {
			got, err := m.Rendezvous(ctx)
			if err == nil && len(got) != len(members) {
				err = fmt.Errorf("formed with %d members", len(got))
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: rendezvous: %v", r, err)
		}
	}
}

// detectLoss waits until every member but the victim has reported the
// victim failed, and returns how long each took after stopped, sorted. An
// event about any other rank, or a leave, fails the test.
func detectLoss(t *testing.T, members []*Cluster, victim int, stopped time.Time) []time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	took := make([]time.Duration, 0, len(members)-1)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for r, m := range members {
		if r == victim {
			continue
		}
		wg.Go(func() {
			select {
			case ev := <-m.Events():
				mu.Lock()
				defer mu.Unlock()
				if ev.Member.Meta.Rank != victim || ev.Left {
					t.Errorf("rank %d: event %v, want rank %d failed", r, ev, victim)
					return
				}
				took = append(took, time.Since(stopped))
			case <-ctx.Done():
				t.Errorf("rank %d never reported rank %d failed", r, victim)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	slices.Sort(took)
	return took
}

// pct is the p-th percentile of sorted (nearest rank).
func pct(sorted []time.Duration, p int) time.Duration {
	i := (len(sorted)*p+99)/100 - 1
	return sorted[max(0, i)].Round(time.Millisecond)
}
