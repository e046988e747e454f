package worker

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestWorkerExitSaysWhy: a worker that exits before connecting fails the
// start with its exit status and the last line it wrote (its error),
// which still reaches the agent's stderr; its stop is logged at debug
// only, since the start's error reports the failure.
func TestWorkerExitSaysWhy(t *testing.T) {
	var stderr, logs bytes.Buffer
	cfg := testWorkerConfig("")
	cfg.Command = []string{"sh", "-c", `echo loading >&2; echo "ValueError: no model in /nowhere" >&2; echo >&2; exit 3`}
	cfg.Stderr = &stderr
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	_, err := Start(context.Background(), cfg)
	mustContain(t, err, "rank 3", "exited before connecting: exit status 3", `its last line: "ValueError: no model in /nowhere"`)
	if !strings.Contains(stderr.String(), "loading\nValueError: no model in /nowhere\n") {
		t.Errorf("the worker's stderr was not passed on: %q", stderr.String())
	}
	if !strings.Contains(logs.String(), `level=DEBUG msg="worker process stopped"`) || strings.Contains(logs.String(), "level=INFO msg=\"worker process stopped\"") {
		t.Errorf("stop of a worker whose start failed, logs:\n%s", logs.String())
	}
}

// TestWorkerCleanStopLogged: a worker that stops after SHUTDOWN is logged
// at info, without an exit status.
func TestWorkerCleanStopLogged(t *testing.T) {
	var logs bytes.Buffer
	cfg := Config{Rank: 0, World: 1, Vocab: 4099, MaxBatch: 4, EOS: 0, Logits: true, Command: pythonWorker(t),
		StartTimeout: 2 * time.Minute, ForwardTimeout: time.Minute,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	w, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), `level=INFO msg="worker process stopped"`) || strings.Contains(logs.String(), "WARN") {
		t.Errorf("clean stop, logs:\n%s", logs.String())
	}
}

// TestOutputTail: the last line that is not blank, carriage returns
// (progress bars) splitting lines too; a long line is cut, on a rune
// boundary; the kept output is bounded.
func TestOutputTail(t *testing.T) {
	var tail outputTail
	if got := tail.said(); got != "" {
		t.Fatalf("nothing written: %q", got)
	}
	for range 1000 {
		_, _ = tail.Write([]byte("filler line\n"))
	}
	_, _ = tail.Write([]byte("shard 1/2 50%\rshard 1/2 100%\r\n\n"))
	if got := tail.lastLine(); got != "shard 1/2 100%" {
		t.Fatalf("last line %q", got)
	}
	if len(tail.buf) > tailSize {
		t.Fatalf("kept %d bytes", len(tail.buf))
	}
	_, _ = tail.Write([]byte(strings.Repeat("é", 400) + "\n"))
	got := tail.lastLine()
	if !strings.HasSuffix(got, "...") || len(got) > lastLineMax+3 || !strings.HasPrefix(got, "éé") {
		t.Fatalf("long line cut to %q", got)
	}
}
