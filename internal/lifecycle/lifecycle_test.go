package lifecycle

import (
	"errors"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestShutdownOrderAndWait(t *testing.T) {
	g := New(nil)
	var order []string
	var mu sync.Mutex
	note := func(s string) {
		mu.Lock()
		order = append(order, s)
		mu.Unlock()
	}
	unblock := make(chan struct{})
	for _, name := range []string{"bus", "membership", "pool"} {
		if err := g.AddCloser(name, func() error { note("close " + name); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	// A goroutine blocked on something a closer releases.
	if err := g.AddCloser("release", func() error { close(unblock); return nil }); err != nil {
		t.Fatal(err)
	}
	if err := g.Go("reader", func() { <-unblock; note("reader done") }); err != nil {
		t.Fatal(err)
	}
	if err := g.Go("watcher", func() { <-g.Stopping(); note("watcher done") }); err != nil {
		t.Fatal(err)
	}
	if err := g.Shutdown(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	got := append([]string(nil), order...)
	mu.Unlock()
	closes := []string{}
	for _, s := range got {
		if len(s) > 6 && s[:6] == "close " {
			closes = append(closes, s)
		}
	}
	want := []string{"close pool", "close membership", "close bus"}
	if len(closes) != 3 || closes[0] != want[0] || closes[1] != want[1] || closes[2] != want[2] {
		t.Fatalf("closers ran in order %v, want %v", closes, want)
	}
	if len(got) != 5 {
		t.Fatalf("Shutdown returned before every goroutine ended: %v", got)
	}
}

func TestShutdownTwiceAndRefusals(t *testing.T) {
	g := New(nil)
	boom := errors.New("boom")
	if err := g.AddCloser("failing", func() error { return boom }); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = g.Shutdown() })
	}
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, boom) {
			t.Fatalf("Shutdown call %d returned %v, want the closer's error", i, err)
		}
	}
	if err := g.Go("late", func() { t.Error("a goroutine started after Shutdown") }); !errors.Is(err, ErrStopped) {
		t.Fatalf("Go after Shutdown: %v, want ErrStopped", err)
	}
	closed := false
	if err := g.AddCloser("late", func() error { closed = true; return nil }); !errors.Is(err, ErrStopped) || !closed {
		t.Fatalf("AddCloser after Shutdown: err %v, ran %v; want ErrStopped and the closer run at once", err, closed)
	}
}
