package e2e

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestWorkerCrashOneError: when the ranks' workers crash at start, launch
// reports the failure once: one ERROR record naming the rank, with its
// cause filled in (the rank's own error, down to the worker's last line);
// the ranks do not print the error as well, the worker's stop is not
// logged at info, and launch does not print it again on exit.
func TestWorkerCrashOneError(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, tpcoordBin, "launch", "--nproc", "2", "--log-format", "text", "--executor", "worker",
		"--worker-cmd", `sh -c 'echo "ValueError: no checkpoint in /nowhere" >&2; exit 3'`)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() == 0 {
		t.Fatalf("launch: %v, want a non-zero exit\n%s", err, out)
	}
	log := string(out)
	var errorLines []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "level=ERROR") {
			errorLines = append(errorLines, l)
		}
	}
	if len(errorLines) != 1 {
		t.Fatalf("%d ERROR records, want 1:\n%s", len(errorLines), log)
	}
	for _, want := range []string{"died; stopping the others", "exited before connecting: exit status 3",
		`cause="start the executor: rank `, `its last line: \"ValueError: no checkpoint in /nowhere\"`} {
		if !strings.Contains(errorLines[0], want) {
			t.Errorf("the ERROR record does not hold %q:\n%s", want, errorLines[0])
		}
	}
	for _, unwanted := range []string{"tpcoord: start the executor", "tpcoord: rank ", `level=INFO msg="worker process stopped"`} {
		if strings.Contains(log, unwanted) {
			t.Errorf("launch's output holds %q: the failure reported twice or at info\n%s", unwanted, log)
		}
	}
}
