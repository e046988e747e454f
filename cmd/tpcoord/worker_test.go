//go:build !agentonly

package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/tpcoord/tpcoord/internal/poll"
	"github.com/tpcoord/tpcoord/rank"
	"github.com/tpcoord/tpcoord/rank/worker"
)

// TestWorkerListen: `tpcoord worker --listen` serves an agent that
// connects with --worker-socket, and stops when its context ends.
func TestWorkerListen(t *testing.T) {
	dir, err := os.MkdirTemp("", "tw")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "w.sock")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- runWorker(ctx, workerCmdConfig{Listen: sock}, worker.ServeConfig{}, slog.New(slog.DiscardHandler))
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("runWorker: %v", err)
		}
	}()
	var w *worker.Executor
	poll.UntilNil(t, 30*time.Second, "a worker started on the listener", func() error {
		w, err = worker.Start(context.Background(), worker.Config{Rank: 0, World: 1, Vocab: 256, MaxBatch: 2, EOS: 0, Logits: true, Socket: sock})
		return err
	})
	defer w.Close()
	b := rank.Batch{Step: 1, Rows: []*rank.Seq{{ID: 1, Prompt: []int32{5, 6}}}}
	got, err := w.Forward(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	syn, _ := rank.NewSynthetic(rank.SyntheticConfig{Vocab: 256, EOS: 0, Logits: true})
	want, _ := syn.Forward(context.Background(), b)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("logits differ from the synthetic executor's")
	}
}
