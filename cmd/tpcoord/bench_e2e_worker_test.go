//go:build !agentonly

package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tpcoord/tpcoord/cmd/tpcoord/internal/bench/e2e"
)

func TestBenchE2EExecutorFlags(t *testing.T) {
	worker := []string{"--executor", "worker", "--worker-cmd", "python3 w.py --socket {socket}", "--vocab", "512", "--eos", "2"}
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{append(slices.Clone(worker), "--forward-time", "5ms"), "--forward-time"},
		{[]string{"--worker-cmd", "python3 w.py"}, "--worker-cmd"},
		{[]string{"--eos", "2"}, "--eos"},
		{[]string{"--forward-timeout", "1m"}, "--forward-timeout"},
		{[]string{"--executor", "card"}, "--executor"},
		{[]string{"--executor", "worker"}, "--worker-cmd"},
		{append(slices.Clone(worker), "--eos", "512"), "--eos"},
		{append(slices.Clone(worker), "--worker-cmd", `python3 "w.py`), "--worker-cmd"},
		{append(slices.Clone(worker), "--temperature", "-0.5"), "--temperature"},
	} {
		_, err := runBenchE2ECmd(t, tc.args...)
		if err == nil || !strings.HasPrefix(err.Error(), tc.flag+":") {
			t.Errorf("%v: error %v, want one naming %s", tc.args, err, tc.flag)
		}
	}
}

// torchPython is /usr/bin/python3 or python3 when it imports torch; the
// test is skipped otherwise, or fails with TPC_REQUIRE_TORCH=1
// (scripts/test.sh sets it), as in e2e.
func torchPython(t *testing.T) string {
	t.Helper()
	for _, py := range []string{"/usr/bin/python3", "python3"} {
		if exec.Command(py, "-c", "import torch").Run() == nil {
			return py
		}
	}
	if os.Getenv("TPC_REQUIRE_TORCH") == "1" {
		t.Fatal("no python3 with torch (scripts/deps.sh installs python3-torch)")
	}
	t.Skip("no python3 with torch")
	return ""
}

// TestBenchE2EWorker runs the full configuration and the baseline (every
// rank gets logits: the worker all-gathers them) on a tiny real model at
// TP 2, greedy: both must give every request all its tokens, and the same
// ones.
func TestBenchE2EWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real clusters with PyTorch workers")
	}
	py := torchPython(t)
	dir := t.TempDir()
	model := filepath.Join(dir, "model")
	gen := exec.Command(py, "../../scripts/make-checkpoint.py", "--out", model, "--seed", "3", "--vocab", "512",
		"--hidden", "64", "--layers", "2", "--heads", "4", "--kv-heads", "2", "--intermediate", "128", "--eos", "5")
	if out, err := gen.CombinedOutput(); err != nil {
		t.Fatalf("make-checkpoint: %v\n%s", err, out)
	}
	workerPy, err := filepath.Abs("../../examples/torch-worker/worker.py")
	if err != nil {
		t.Fatal(err)
	}
	tokens := filepath.Join(dir, "tokens.jsonl")
	out, err := runBenchE2ECmd(t, "--executor", "worker", "--vocab", "512", "--eos", "5",
		"--worker-cmd", fmt.Sprintf("%s %s --socket {socket} --model %s --threads 1", py, workerPy, model),
		"--nproc", "2", "--batch", "3", "--tokens", "5", "--temperature", "0", "--tokens-out", tokens,
		"--combos", "pool+logspace+rank0,sync+softmax+all", "--json")
	if err != nil {
		t.Fatalf("bench e2e: %v\noutput:\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for i, line := range lines[:2] {
		var r e2e.Result
		dec := json.NewDecoder(strings.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("line %d: %v: %s", i, err, line)
		}
		if r.Executor != e2e.WorkerExecutor || r.Impl != "tpcoord" || r.Synthetic != nil || strings.Contains(line, "forward_time_ms") {
			t.Errorf("line %d: executor %q impl %q synthetic %v: %s", i, r.Executor, r.Impl, r.Synthetic, line)
		}
		if r.OutputTokens != 3*5 || r.NProc != 2 || r.Vocab != 512 {
			t.Errorf("line %d: %d tokens, nproc %d, vocab %d", i, r.OutputTokens, r.NProc, r.Vocab)
		}
		if r.Step == nil || r.Step.Steps < 5 || !(r.Step.Forward > 0) {
			t.Errorf("line %d: step breakdown %+v", i, r.Step)
		}
	}
	byCombo := readTokensOut(t, tokens)
	full, base := byCombo[e2e.Full.String()], byCombo[e2e.Baseline.String()]
	if len(full) != 3 || len(base) != 3 {
		t.Fatalf("tokens-out: %d full and %d baseline requests, want 3 each", len(full), len(base))
	}
	for i := range full {
		if len(full[i]) != 5 || !slices.Equal(full[i], base[i]) {
			t.Errorf("request %d: greedy tokens %v (full) and %v (baseline)", i, full[i], base[i])
		}
	}
}

// readTokensOut reads --tokens-out: each combination's requests' tokens.
func readTokensOut(t *testing.T, path string) map[string][][]int32 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][][]int32{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l e2e.TokensLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("%v: %s", err, sc.Text())
		}
		if l.Request != len(out[l.Combo]) {
			t.Fatalf("%s: request %d out of order", l.Combo, l.Request)
		}
		out[l.Combo] = append(out[l.Combo], l.Tokens)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
