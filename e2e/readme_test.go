package e2e

import (
	"bytes"
	"context"
	"os/exec"
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
