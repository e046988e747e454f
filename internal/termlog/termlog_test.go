package termlog

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestHandlerLines: time of day, level (padded so the messages line up),
// message, then the attributes as TextHandler writes them, including
// those of WithAttrs and WithGroup; records below the level are dropped.
func TestHandlerLines(t *testing.T) {
	var b bytes.Buffer
	log := slog.New(NewHandler(&b, slog.LevelDebug)).With("job", "demo", "rank", 0)
	at := time.Date(2026, 1, 2, 13, 4, 5, 678_900_000, time.Local)
	rec := func(l slog.Level, msg string, args ...any) slog.Record {
		r := slog.NewRecord(at, l, msg, 0)
		r.Add(args...)
		return r
	}
	h := log.Handler()
	for _, r := range []slog.Record{
		rec(slog.LevelInfo, "world formed", "world_size", 4, "took", 103*time.Millisecond),
		rec(slog.LevelWarn, "peer lost", "err", errors.New("rank 2: no heartbeat"), "level", "not the builtin"),
		rec(slog.LevelDebug, "two\nlines"),
	} {
		if err := h.Handle(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	if err := log.WithGroup("pool").Handler().Handle(context.Background(), rec(slog.LevelError, "pool", "rows", 8)); err != nil {
		t.Fatal(err)
	}
	want := `13:04:05.678 INFO  world formed job=demo rank=0 world_size=4 took=103ms
13:04:05.678 WARN  peer lost job=demo rank=0 err="rank 2: no heartbeat" level="not the builtin"
13:04:05.678 DEBUG "two\nlines" job=demo rank=0
13:04:05.678 ERROR pool job=demo rank=0 pool.rows=8
`
	if b.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
	}

	b.Reset()
	quiet := slog.New(NewHandler(&b, slog.LevelWarn))
	quiet.Info("not shown")
	quiet.Warn("shown")
	if got := b.String(); strings.Count(got, "\n") != 1 || !strings.Contains(got, " WARN  shown\n") {
		t.Fatalf("at level warn: %q", got)
	}
}

// TestHandlerWholeLines: concurrent loggers sharing a handler never mix
// their lines.
func TestHandlerWholeLines(t *testing.T) {
	var b bytes.Buffer
	log := slog.New(NewHandler(&b, nil))
	var wg sync.WaitGroup
	for g := range 4 {
		l := log.With("g", g)
		wg.Go(func() {
			for range 200 {
				l.Info("line", "payload", strings.Repeat("x", 100))
			}
		})
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 800 {
		t.Fatalf("%d lines, want 800", len(lines))
	}
	for _, l := range lines {
		if !strings.HasSuffix(l, " payload="+strings.Repeat("x", 100)) || !strings.Contains(l, " INFO  line g=") {
			t.Fatalf("garbled line %q", l)
		}
	}
}

// TestIsTerminalNot: pipes, regular files and other writers are not
// terminals.
func TestIsTerminalNot(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	f, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var nilFile *os.File
	for name, w := range map[string]io.Writer{"pipe": w, "file": f, "buffer": &bytes.Buffer{}, "nil file": nilFile} {
		if IsTerminal(w) {
			t.Errorf("%s: IsTerminal = true", name)
		}
	}
}

// TestHandlerColor: with colour, the time is dimmed and each level has
// its colour, the rest of the line as without; without, no escape
// sequence at all.
func TestHandlerColor(t *testing.T) {
	at := time.Date(2026, 1, 2, 13, 4, 5, 678_900_000, time.Local)
	for _, c := range []struct {
		level slog.Level
		want  string
	}{
		{slog.LevelDebug, "\x1b[2m13:04:05.678\x1b[0m \x1b[34mDEBUG\x1b[0m x k=1\n"},
		{slog.LevelInfo, "\x1b[2m13:04:05.678\x1b[0m \x1b[32mINFO\x1b[0m  x k=1\n"},
		{slog.LevelWarn, "\x1b[2m13:04:05.678\x1b[0m \x1b[33mWARN\x1b[0m  x k=1\n"},
		{slog.LevelError, "\x1b[2m13:04:05.678\x1b[0m \x1b[1;31mERROR\x1b[0m x k=1\n"},
	} {
		var colored, plain bytes.Buffer
		r := slog.NewRecord(at, c.level, "x", 0)
		r.Add("k", 1)
		if err := NewHandler(&colored, slog.LevelDebug).WithColor().Handle(context.Background(), r); err != nil {
			t.Fatal(err)
		}
		if err := NewHandler(&plain, slog.LevelDebug).Handle(context.Background(), r); err != nil {
			t.Fatal(err)
		}
		if colored.String() != c.want {
			t.Errorf("%v: %q, want %q", c.level, colored.String(), c.want)
		}
		if strings.Contains(plain.String(), "\x1b") {
			t.Errorf("%v without colour: %q", c.level, plain.String())
		}
	}
}
