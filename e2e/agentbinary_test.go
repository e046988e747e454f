package e2e

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestLaunchRunsAgentBinary: launch's ranks run the agent-only build beside
// tpcoord (TestMain builds both, as the packages ship them), and
// --agent-binary names another.
func TestLaunchRunsAgentBinary(t *testing.T) {
	agent := tpcoordBin + "-agent"
	j := launch(t, "--nproc", "2")
	checkRankExe(t, j, agent)
	if !strings.Contains(j.log.String(), "binary="+agent) {
		t.Errorf("launch's log does not name the ranks' binary %s", agent)
	}
	if _, err := j.stop(syscall.SIGTERM, 60*time.Second); err != nil {
		t.Fatalf("launch: %v", err)
	}
	j = launch(t, "--nproc", "1", "--agent-binary", tpcoordBin)
	checkRankExe(t, j, tpcoordBin)
	if _, err := j.stop(syscall.SIGTERM, 60*time.Second); err != nil {
		t.Fatalf("launch --agent-binary: %v", err)
	}
	// A rank 0 that hosts the NATS server runs tpcoord: the agent-only
	// build has no server.
	j = launch(t, "--nproc", "2", "--nats-in-rank0")
	if exe := rankExe(t, j.info.PIDs[0]); exe != tpcoordBin {
		t.Errorf("rank 0, hosting the NATS server, runs %s; want %s", exe, tpcoordBin)
	}
	if exe := rankExe(t, j.info.PIDs[1]); exe != agent {
		t.Errorf("rank 1 runs %s; want %s", exe, agent)
	}
	if _, err := j.stop(syscall.SIGTERM, 60*time.Second); err != nil {
		t.Fatalf("launch --nats-in-rank0: %v", err)
	}
}

// TestAgentBinaryCommands: the agent-only build runs the agent and says
// tpcoord's version; the other commands are not in it.
func TestAgentBinaryCommands(t *testing.T) {
	agent := tpcoordBin + "-agent"
	out, err := exec.Command(agent, "launch", "--nproc", "1").CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), `unknown command "launch"`) {
		t.Errorf("tpcoord-agent launch: %v, %q; want exit 2, unknown command", err, out)
	}
	want := mustOutput(t, tpcoordBin, "version", "--json")
	if got := mustOutput(t, agent, "version", "--json"); got != want {
		t.Errorf("tpcoord-agent version --json: %q, tpcoord's %q", got, want)
	}
	out, err = exec.Command(agent, "agent", "--world-size", "1", "--nats-serve", "--nats", "nats://token@127.0.0.1:0").CombinedOutput()
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "nats-serve: this build (tpcoord-agent) has no NATS server") {
		t.Errorf("tpcoord-agent agent --nats-serve: %v, %q; want exit 2 naming --nats-serve", err, out)
	}
	help := mustOutput(t, agent, "agent", "--help")
	if !strings.Contains(help, "--world-size") {
		t.Errorf("tpcoord-agent agent --help has no --world-size:\n%s", help)
	}
}

// checkRankExe checks that every rank of j runs bin.
func checkRankExe(t *testing.T, j *job, bin string) {
	t.Helper()
	if len(j.info.PIDs) == 0 {
		t.Fatal("the ready file names no ranks")
	}
	for r, pid := range j.info.PIDs {
		if exe := rankExe(t, pid); exe != bin {
			t.Errorf("rank %d (pid %d) runs %s, want %s", r, pid, exe, bin)
		}
	}
}

// rankExe is the binary process pid runs.
func rankExe(t *testing.T, pid int) string {
	t.Helper()
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		t.Fatalf("pid %d: %v", pid, err)
	}
	return exe
}
