package membership

import (
	"context"
	"log/slog"
	"testing"
	"time"
)

// recordHandler sends every log record to a channel.
type recordHandler struct{ records chan slog.Record }

func (h recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h recordHandler) Handle(_ context.Context, r slog.Record) error {
	h.records <- r
	return nil
}
func (h recordHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h recordHandler) WithGroup(string) slog.Handler      { return h }

func nextRecord(t *testing.T, records <-chan slog.Record) slog.Record {
	t.Helper()
	select {
	case r := <-records:
		return r
	case <-time.After(30 * time.Second):
		t.Fatal("no log record within 30 s")
		return slog.Record{}
	}
}

func retryIn(r slog.Record) time.Duration {
	var d time.Duration
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "retry_in" {
			d = a.Value.Duration()
		}
		return true
	})
	return d
}

// TestRetryBacksOff: a loop's pause doubles from 5 ms up to 1 s, each
// logged with the error; Shutdown ends a pause at once, and a loop that
// fails after Shutdown stops without a pause or a log.
func TestRetryBacksOff(t *testing.T) {
	h := recordHandler{records: make(chan slog.Record, 16)}
	s := &sockets{log: slog.New(h), done: make(chan struct{})}
	delay := time.Duration(0)
	for _, want := range []time.Duration{5, 10, 20} {
		if !s.retry(&delay, "reading", errBoom) {
			t.Fatal("retry stopped a loop before Shutdown")
		}
		if got := retryIn(nextRecord(t, h.records)); got != want*time.Millisecond || delay != got {
			t.Fatalf("pause %v (delay %v), want %v", got, delay, want*time.Millisecond)
		}
	}

	// From 800 ms the pause is capped at 1 s; Shutdown cuts it short. A
	// pause run to its end returns 1 s or more after the call began; cut
	// short, it returns as soon as this test has read the log record.
	delay = 800 * time.Millisecond
	stopped := make(chan bool)
	began := time.Now()
	go func() { stopped <- s.retry(&delay, "reading", errBoom) }()
	if got := retryIn(nextRecord(t, h.records)); got != time.Second {
		t.Fatalf("pause %v, want the 1 s cap", got)
	}
	close(s.done)
	select {
	case goOn := <-stopped:
		if goOn {
			t.Fatal("retry let a loop go on after Shutdown")
		}
		if took := time.Since(began); took >= time.Second {
			t.Fatalf("retry returned %v after it began: Shutdown did not cut the 1 s pause short", took)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Shutdown did not end the pause")
	}

	if s.retry(&delay, "reading", errBoom) {
		t.Fatal("retry let a loop go on after Shutdown")
	}
	select {
	case r := <-h.records:
		t.Fatalf("logged after Shutdown: %s", r.Message)
	default:
	}
}

type boom struct{}

func (boom) Error() string { return "boom" }

var errBoom error = boom{}
