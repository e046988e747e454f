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

	"github.com/tpcoord/tpcoord/rank"
	"github.com/tpcoord/tpcoord/rank/worker"
)

func TestWorkerFlagsValidate(t *testing.T) {
	cases := []struct {
		o    workerOpts
		want string
	}{
		{workerOpts{WorkerDType: "float32", ForwardTimeout: time.Second}, "needs --worker-cmd or --worker-socket"},
		{workerOpts{WorkerCmd: "x", WorkerSocket: "y", WorkerDType: "float32", ForwardTimeout: time.Second}, "not both"},
		{workerOpts{WorkerCmd: "x", WorkerDType: "float32"}, "forward-timeout"},
		{workerOpts{WorkerCmd: "x", WorkerDType: "int8", ForwardTimeout: time.Second}, "worker-dtype"},
		{workerOpts{WorkerCmd: "x 'y", WorkerDType: "float32", ForwardTimeout: time.Second}, "worker-cmd: unterminated"},
		{workerOpts{WorkerCmd: "x", WorkerDType: "bf16", ForwardTimeout: time.Second}, ""},
	}
	for _, tc := range cases {
		err := tc.o.validate("worker")
		if tc.want == "" {
			if err != nil {
				t.Errorf("%+v: %v", tc.o, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.o, err, tc.want)
		}
	}
	if err := (&workerOpts{}).validate("synthetic"); err != nil {
		t.Errorf("synthetic executor: %v", err)
	}
}

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
	deadline := time.Now().Add(30 * time.Second)
	for w == nil {
		w, err = worker.Start(context.Background(), worker.Config{Rank: 0, World: 1, Vocab: 256, MaxBatch: 2, EOS: 0, Logits: true, Socket: sock})
		if err != nil {
			if time.Now().After(deadline) {
				t.Fatal(err)
			}
			time.Sleep(10 * time.Millisecond) // polling for the listener, not a synchronisation
		}
	}
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
