//go:build !agentonly

package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
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
	b := rank.Batch{Step: 1, Rows: []*rank.Seq{{ID: 1, Prompt: []int32{5, 6}, Fed: 2}}}
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

// TestWorkerKVFlags: --kv-blocks, --block-size and --max-model-len reach
// the handshake; bad values are refused naming the flag.
func TestWorkerKVFlags(t *testing.T) {
	for _, tc := range []struct {
		cfg  workerCmdConfig
		want string
	}{
		{workerCmdConfig{Socket: "s", BlockSize: 0}, "block-size"},
		{workerCmdConfig{Socket: "s", BlockSize: 16, KVBlocks: -1}, "kv-blocks"},
		{workerCmdConfig{Socket: "s", BlockSize: 16, MaxModelLen: -1}, "max-model-len"},
		{workerCmdConfig{Socket: "s", BlockSize: 16, MaxVersion: 4}, "max-version"},
	} {
		if _, err := tc.cfg.serveConfig(false); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error naming %s", tc.cfg, err, tc.want)
		}
	}
	cfg := workerCmdConfig{KVBlocks: 512, BlockSize: 32, MaxModelLen: 8192}
	sc, err := (&workerCmdConfig{Socket: "s", KVBlocks: 512, BlockSize: 32, MaxModelLen: 8192}).serveConfig(false)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "tw")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	cfg.Listen = filepath.Join(dir, "w.sock")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runWorker(ctx, cfg, sc, slog.New(slog.DiscardHandler)) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("runWorker: %v", err)
		}
	}()
	var w *worker.Executor
	poll.UntilNil(t, 30*time.Second, "a worker started on the listener", func() error {
		w, err = worker.Start(context.Background(), worker.Config{Rank: 0, World: 1, Vocab: 256, MaxBatch: 2, EOS: 0, Socket: cfg.Listen, BlockSize: 32})
		return err
	})
	defer w.Close()
	if got, want := w.KVCapacity(), (rank.KVCapacity{BlockSize: 32, Blocks: 512, MaxModelLen: 8192}); got != want {
		t.Errorf("capacity %+v, want %+v", got, want)
	}
}
