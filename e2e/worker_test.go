package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tpcoord/tpcoord/internal/poll"
)

// pythonWorkerCmd is --worker-cmd for the Python reference worker.
func pythonWorkerCmd(t *testing.T) string {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not found")
	}
	script, err := filepath.Abs("../examples/worker/worker.py")
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%s %s --socket {socket}", py, script)
}

// runJob launches a job, runs reqs at once, stops it with SIGTERM and
// returns the results.
func runJob(t *testing.T, reqs []request, args ...string) []generated {
	t.Helper()
	j := launch(t, args...)
	got := runAll(t, j, reqs)
	if _, err := j.stop(syscall.SIGTERM, 60*time.Second); err != nil {
		t.Fatalf("launch %v exited with %v", args, err)
	}
	for _, pid := range j.info.PIDs {
		if alive(pid) {
			t.Errorf("rank pid %d still running after launch exited", pid)
		}
	}
	return got
}

// TestWorkerSameTokensAsSynthetic: with the Python reference worker and
// with `tpcoord worker`, TP=2 and TP=4 jobs sample exactly the tokens of a
// job with the built-in synthetic executor, for the same seeded requests,
// in protocol version 2 and with workers capped at version 1.
func TestWorkerSameTokensAsSynthetic(t *testing.T) {
	py := pythonWorkerCmd(t)
	goWorker := tpcoordBin + " worker --socket {socket} --log-format text"
	cases := []struct {
		name   string
		nproc  int
		vocab  int
		worker string
	}{
		{"python-tp2", 2, 4096, py},
		{"python-tp4", 4, 4096, py},
		{"go-tp2", 2, 4096, goWorker},
		{"go-tp4", 4, 4096, goWorker},
		{"python-tp2-vocab100352", 2, 100352, py},
		{"python-tp2-v1", 2, 4096, py + " --max-version 1"},
		{"go-tp2-v1", 2, 4096, goWorker + " --max-version 1"},
	}
	reqs := workload(4)
	want := map[int][]generated{} // by vocab
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			vocab := strconv.Itoa(tc.vocab)
			if want[tc.vocab] == nil {
				want[tc.vocab] = runJob(t, reqs, "--nproc", "2", "--job", "e2e-wsyn-"+vocab, "--vocab", vocab, "--forward-time", "1ms")
				checkResults(t, reqs, want[tc.vocab])
			}
			got := runJob(t, reqs, "--nproc", strconv.Itoa(tc.nproc), "--job", "e2e-w-"+tc.name, "--vocab", vocab,
				"--executor", "worker", "--worker-cmd", tc.worker, "--forward-timeout", "60s")
			for i := range reqs {
				if fmt.Sprint(got[i]) != fmt.Sprint(want[tc.vocab][i]) {
					t.Errorf("request %d: worker %v, synthetic %v", i, got[i], want[tc.vocab][i])
				}
			}
		})
	}
}

// children returns the pids whose parent is pid.
func children(pid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		c, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(data)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:]) // state, ppid, ...
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, c)
		}
	}
	return out
}

// TestWorkerKilledEndsJob: SIGKILL one rank's worker mid-run; the job ends
// with a non-zero exit naming the rank, and no process is left behind.
func TestWorkerKilledEndsJob(t *testing.T) {
	py := pythonWorkerCmd(t)
	j := launch(t, "--nproc", "2", "--job", "e2e-wkill", "--vocab", "4096", "--eos", "-1",
		"--executor", "worker", "--worker-cmd", py, "--forward-timeout", "60s")
	var workers []int
	for _, pid := range j.info.PIDs {
		workers = append(workers, children(pid)...)
	}
	victims := children(j.info.PIDs[1])
	if len(victims) != 1 || len(workers) != 2 {
		t.Fatalf("worker processes: rank 1 has %v, all ranks %v; want one per rank", victims, workers)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	genDone := make(chan error, 1)
	go func() {
		g, err := j.generate(ctx, "--prompt", "5,6,7", "--max-tokens", "1000000", "--seed", "1")
		if err == nil && g.FinishReason != "error" {
			err = fmt.Errorf("generate finished with %q after %d tokens", g.FinishReason, len(g.Tokens))
		} else {
			err = nil
		}
		genDone <- err
	}()
	poll.UntilDetail(t, 60*time.Second, "decoding under way", func() (bool, string) {
		ranks, err := j.status()
		if err != nil {
			return false, err.Error()
		}
		for _, r := range ranks {
			if r.Rank == 1 && r.Step >= 5 {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", ranks)
	})
	if err := syscall.Kill(victims[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err := j.wait(60 * time.Second)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() == 0 {
		t.Fatalf("launch exit: %v, want a non-zero exit", err)
	}
	out := j.log.String()
	// The agent's error names the rank and the worker; which rank launch
	// reports as dead first depends on how the membership layer treats an
	// aborting rank, so only the agent's line is required.
	for _, want := range []string{fmt.Sprintf("rank 1: worker (pid %d)", victims[0]), "signal: killed"} {
		if !strings.Contains(out, want) {
			t.Errorf("launch output does not contain %q", want)
		}
	}
	if err := <-genDone; err != nil {
		t.Error(err)
	}
	for _, pid := range append(j.info.PIDs, workers...) {
		if alive(pid) {
			t.Errorf("pid %d still running after launch exited", pid)
		}
	}
}

// TestWorkerHandshakeRefused: a worker reporting another vocab is refused
// at start with both values named, and the job does not start.
func TestWorkerHandshakeRefused(t *testing.T) {
	ready := filepath.Join(t.TempDir(), "ready.json")
	cmd := exec.Command(tpcoordBin, "launch", "--ready-file", ready, "--log-format", "text", "--nproc", "2", "--job", "e2e-wrefuse",
		"--vocab", "4096", "--executor", "worker", "--worker-cmd", tpcoordBin+" worker --socket {socket} --vocab 8192")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() == 0 {
		t.Fatalf("launch exit: %v, want non-zero\n%s", err, out)
	}
	if want := "vocab: agent has 4096, worker has 8192"; !strings.Contains(string(out), want) {
		t.Errorf("output does not contain %q:\n%s", want, out)
	}
}

// TestWorkerStartTimeoutFlag: a worker that never connects is given up
// on after --worker-start-timeout, and the job's error says so.
func TestWorkerStartTimeoutFlag(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	out, err := runLaunch(ctx, "--nproc", "1", "--job", "e2e-wstart", "--log-format", "text", "--executor", "worker",
		"--worker-start-timeout", "2s", "--worker-cmd", "sleep 60")
	if err == nil || ctx.Err() != nil {
		t.Fatalf("launch: %v (context %v), want it to fail:\n%s", err, ctx.Err(), tail(out, 20))
	}
	if took := time.Since(start); took > 45*time.Second {
		t.Errorf("the job took %v to give up on a 2 s start timeout", took)
	}
	if !strings.Contains(out, "2s") || !strings.Contains(out, "start timeout") {
		t.Errorf("launch output does not name the start timeout of 2s:\n%s", tail(out, 20))
	}
}
