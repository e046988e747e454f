package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tpcoord/tpcoord/internal/poll"
)

var tpcoordBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tpcoord-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	tpcoordBin = filepath.Join(dir, "tpcoord")
	// tpcoord, and beside it its agent-only build, which launch's ranks run.
	for _, args := range [][]string{{"-o", tpcoordBin}, {"-tags", "agentonly", "-o", tpcoordBin + "-agent"}} {
		build := exec.Command("go", append(append([]string{"build"}, args...), "../cmd/tpcoord")...)
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "build tpcoord:", args, err)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// syncBuffer is a bytes.Buffer safe for a process writing while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type readyInfo struct {
	NATSURL string `json:"nats_url"`
	Job     string `json:"job"`
	PIDs    []int  `json:"pids"`
	// HTTPURL is the OpenAI-compatible API's base URL (launch --http).
	HTTPURL string `json:"http_url"`
}

// job is one running `tpcoord launch`.
type job struct {
	t      *testing.T
	cmd    *exec.Cmd
	log    *syncBuffer
	info   readyInfo
	ready  string // the ready file
	exited chan struct{}
	err    error // valid after exited is closed
}

// launch starts `tpcoord launch` and waits for its ready file.
func launch(t *testing.T, args ...string) *job {
	t.Helper()
	return launchBin(t, tpcoordBin, args...)
}

// launchBin is launch of the tpcoord binary bin.
func launchBin(t *testing.T, bin string, args ...string) *job {
	t.Helper()
	ready := filepath.Join(t.TempDir(), "ready.json")
	cmd := exec.Command(bin, append([]string{"launch", "--ready-file", ready, "--log-format", "text"}, args...)...)
	return startJob(t, "launch", cmd, ready, 90*time.Second, func(readyInfo) bool { return true })
}

// startJob runs cmd, a command that writes the ready file ready (launch,
// serve-model), and waits up to within for a ready file that complete
// accepts; it fails the test if cmd exits first. The cleanup kills cmd and
// every rank it named, and logs its output if the test failed.
func startJob(t *testing.T, what string, cmd *exec.Cmd, ready string, within time.Duration, complete func(readyInfo) bool) *job {
	t.Helper()
	j := &job{t: t, cmd: cmd, log: &syncBuffer{}, ready: ready, exited: make(chan struct{})}
	j.cmd.Stdout, j.cmd.Stderr = j.log, j.log
	if err := j.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { j.err = j.cmd.Wait(); close(j.exited) }()
	t.Cleanup(func() {
		select {
		case <-j.exited:
		default:
			_ = j.cmd.Process.Kill()
			<-j.exited
		}
		for _, pid := range j.info.PIDs {
			if alive(pid) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		if t.Failed() {
			t.Logf("%s output:\n%s", what, j.log.String())
		}
	})
	poll.UntilDetail(t, within, what+"'s ready file", func() (bool, string) {
		select {
		case <-j.exited:
			t.Fatalf("%s exited before ready: %v\n%s", what, j.err, j.log.String())
		default:
		}
		data, err := os.ReadFile(ready)
		if err != nil {
			return false, err.Error()
		}
		return json.Unmarshal(data, &j.info) == nil && complete(j.info), string(data)
	})
	return j
}

// readyAgain is the ready file now: launch rewrites it when it starts a
// rank again.
func (j *job) readyAgain() readyInfo {
	j.t.Helper()
	var info readyInfo
	data, err := os.ReadFile(j.ready)
	if err == nil {
		err = json.Unmarshal(data, &info)
	}
	if err != nil {
		j.t.Fatalf("ready file: %v", err)
	}
	return info
}

// stop sends sig to launch and waits up to limit for it to exit; it
// returns how long launch took to exit and its exit error.
func (j *job) stop(sig syscall.Signal, limit time.Duration) (time.Duration, error) {
	j.t.Helper()
	start := time.Now()
	if err := j.cmd.Process.Signal(sig); err != nil {
		j.t.Fatal(err)
	}
	err := j.wait(limit)
	return time.Since(start), err
}

func (j *job) wait(limit time.Duration) error {
	j.t.Helper()
	select {
	case <-j.exited:
		return j.err
	case <-time.After(limit):
		j.t.Fatalf("launch did not exit within %v\n%s", limit, j.log.String())
		return nil
	}
}

// alive reports whether pid is a running (not zombie) process.
func alive(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	s := string(data)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

type generated struct {
	Tokens       []int32 `json:"tokens"`
	FinishReason string  `json:"finish_reason"`
}

// generate runs `tpcoord generate --json` and returns its last line.
func (j *job) generate(ctx context.Context, args ...string) (generated, error) {
	cmd := exec.CommandContext(ctx, tpcoordBin, append([]string{"generate", "--nats", j.info.NATSURL, "--job", j.info.Job, "--json"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return generated{}, fmt.Errorf("generate %v: %w: %s", args, err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var g generated
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &g); err != nil {
		return g, fmt.Errorf("generate output %q: %w", out, err)
	}
	return g, nil
}

type rankStatus struct {
	Rank     int               `json:"rank"`
	Epoch    uint32            `json:"epoch"`
	Rows     int               `json:"rows"`
	State    string            `json:"state"`
	Step     uint64            `json:"step"`
	Digest   string            `json:"digest"`
	Rejected map[string]uint64 `json:"rejected"`
	Waiting  int               `json:"waiting"`
	// MetricsAddr is where the rank serves /metrics (agent --metrics-addr).
	MetricsAddr string `json:"metrics_addr"`
}

func (j *job) status() ([]rankStatus, error) {
	var ranks []rankStatus
	return ranks, statusInto(j, &ranks)
}

func contextWithTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

// agent is one `tpcoord agent` process started by hand.
type agent struct {
	t      *testing.T
	rank   int
	cmd    *exec.Cmd
	log    *syncBuffer // its stdout and stderr
	exited chan struct{}
	err    error // valid after exited is closed
}

// startAgent runs `tpcoord agent --rank rank args...`.
func startAgent(t *testing.T, rank int, args ...string) *agent {
	t.Helper()
	return startAgentEnv(t, rank, nil, args...)
}

// startAgentEnv is startAgent with extra environment variables. The
// process is killed, if still running, and its log shown on failure when
// the test ends.
func startAgentEnv(t *testing.T, rank int, env []string, args ...string) *agent {
	t.Helper()
	a := &agent{t: t, rank: rank, log: &syncBuffer{}, exited: make(chan struct{})}
	a.cmd = exec.Command(tpcoordBin, append([]string{"agent", "--rank", strconv.Itoa(rank)}, args...)...)
	a.cmd.Stdout, a.cmd.Stderr = a.log, a.log
	if env != nil {
		a.cmd.Env = append(os.Environ(), env...)
	}
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { a.err = a.cmd.Wait(); close(a.exited) }()
	t.Cleanup(func() {
		select {
		case <-a.exited:
		default:
			_ = a.cmd.Process.Kill()
			<-a.exited
		}
		if t.Failed() {
			t.Logf("rank %d output:\n%s", a.rank, a.log.String())
		}
	})
	return a
}

func (a *agent) running() bool {
	select {
	case <-a.exited:
		return false
	default:
		return true
	}
}

// wait waits up to limit for the agent to exit and returns its exit code.
func (a *agent) wait(limit time.Duration) int {
	a.t.Helper()
	select {
	case <-a.exited:
	case <-time.After(limit):
		a.t.Fatalf("rank %d did not exit within %v\n%s", a.rank, limit, a.log.String())
	}
	var ee *exec.ExitError
	if errors.As(a.err, &ee) {
		return ee.ExitCode()
	}
	if a.err != nil {
		a.t.Fatalf("rank %d: %v", a.rank, a.err)
	}
	return 0
}

// rankNATSURL is the NATS URL a rank process got from launch (its
// environment's TPC_NATS): the ranks' credentials, which clients do not
// have. Tests that play a process with rank access (a stale rank of
// another job, an insider) use it.
func rankNATSURL(t *testing.T, pid int) string {
	t.Helper()
	u, ok := procEnv(t, pid)["TPC_NATS"]
	if !ok {
		t.Fatalf("pid %d has no TPC_NATS", pid)
	}
	return u
}
