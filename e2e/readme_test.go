package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestReadmeDemo runs the README's first set-up command, a local 4-rank job
// with the embedded NATS server and the synthetic executor that submits its
// 8 seeded demo requests and exits. It must exit 0 with every request
// answered, and a second run must give the same tokens.
func TestReadmeDemo(t *testing.T) {
	var runs [2][]string
	for i := range runs {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		cmd := exec.CommandContext(ctx, tpcoordBin, "launch", "--nproc", "4", "--demo")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		cancel()
		if err != nil {
			t.Fatalf("run %d: launch --demo: %v\n%s", i, err, stderr.String())
		}
		line := regexp.MustCompile(`^request (\d) \((stop|length), (\d+) tokens\): \[[\d ]+\]$`)
		for _, l := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
			if line.MatchString(l) {
				runs[i] = append(runs[i], l)
			}
		}
		if len(runs[i]) != 8 {
			t.Fatalf("run %d: %d request lines, want 8:\n%s", i, len(runs[i]), stdout.String())
		}
		if !regexp.MustCompile(`(?m)^8 requests, \d+ output tokens in .*\(TP=4,`).MatchString(stdout.String()) {
			t.Errorf("run %d: no summary line:\n%s", i, stdout.String())
		}
	}
	if strings.Join(runs[0], "\n") != strings.Join(runs[1], "\n") {
		t.Errorf("two demo runs differ:\n%s\n---\n%s", strings.Join(runs[0], "\n"), strings.Join(runs[1], "\n"))
	}
}

// TestReadmeTorchDemo runs the README's real-model commands as written
// there (the checkpoint in a temporary directory instead of /tmp): a
// seeded random Llama checkpoint, then a 2-rank job with the PyTorch
// worker that answers the 8 demo requests and exits 0.
func TestReadmeTorchDemo(t *testing.T) {
	py := torchPython(t)
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "tiny-llama")
	text := strings.ReplaceAll(string(readme), "/tmp/tiny-llama", dir)
	mk := regexp.MustCompile(`(?m)^/usr/bin/python3 (scripts/make-checkpoint\.py .*?)\s+#`).FindStringSubmatch(text)
	run := regexp.MustCompile(`(?m)^go run ./cmd/tpcoord (launch --nproc 2 --demo .*?) \\\n\s+--worker-cmd "([^"]+)"`).FindStringSubmatch(text)
	if mk == nil || run == nil {
		t.Fatal("the README has no real-model commands (make-checkpoint.py, then launch --nproc 2 --demo ... --worker-cmd)")
	}
	cmd := exec.Command(py, strings.Fields(mk[1])...)
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", mk[1], err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd = exec.CommandContext(ctx, tpcoordBin, append(strings.Fields(run[1]), "--worker-cmd", run[2])...)
	cmd.Dir = ".."
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\n%s", run[1], err, tail(stderr.String(), 40))
	}
	if !regexp.MustCompile(`(?m)^8 requests, \d+ output tokens in .*\(TP=2, model worker\)`).MatchString(stdout.String()) {
		t.Errorf("no summary line:\n%s", stdout.String())
	}
}
