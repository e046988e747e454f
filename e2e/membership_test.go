package e2e

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/tpcoord/tpcoord/internal/poll"
	"github.com/tpcoord/tpcoord/internal/stats"
)

// These tests start agents by hand (no launch), so what they see is the
// agents' own detection: NATS heartbeats and memberlist, not launch's
// process supervision.

// embeddedNATS starts a NATS server in the test process.
func embeddedNATS(t *testing.T) string {
	t.Helper()
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoSigs: true, NoLog: true, MaxPayload: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("embedded NATS not ready")
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	return srv.ClientURL()
}

// manualJob is a job whose agents the test starts itself.
type manualJob struct {
	t      *testing.T
	nats   string
	job    string
	rank0  string // memberlist address of rank 0
	common []string
	agents map[int]*agent
}

func newManualJob(t *testing.T, job string, world int, extra ...string) *manualJob {
	t.Helper()
	m := &manualJob{t: t, nats: embeddedNATS(t), job: job, agents: map[int]*agent{}}
	m.rank0 = fmt.Sprintf("127.0.0.1:%d", pickPort(t, true))
	m.common = append([]string{"--job", job, "--world-size", strconv.Itoa(world), "--nats", m.nats, "--local"}, extra...)
	return m
}

func (m *manualJob) start(rank int, extra ...string) *agent {
	m.t.Helper()
	args := slices.Clone(m.common)
	if rank == 0 {
		args = append(args, "--bind", m.rank0)
	} else {
		args = append(args, "--bind", "127.0.0.1:0", "--join", m.rank0)
	}
	a := startAgent(m.t, rank, append(append(args, "--log-format", "text"), extra...)...)
	m.agents[rank] = a
	return a
}

func (m *manualJob) startAll(world int, extra ...string) {
	m.t.Helper()
	for r := range world {
		m.start(r, extra...)
	}
}

// client returns a job handle for the generate and status helpers.
func (m *manualJob) client() *job {
	return &job{t: m.t, info: readyInfo{NATSURL: m.nats, Job: m.job}}
}

func (m *manualJob) waitRunning(world int) {
	m.t.Helper()
	c := m.client()
	poll.UntilDetail(m.t, 90*time.Second, "every rank answering status", func() (bool, string) {
		ranks, err := c.status()
		return err == nil && len(ranks) == world, fmt.Sprintf("%+v %v", ranks, err)
	})
}

// TestKillRankDetected: SIGKILL rank 2 of 4 mid-generation with no
// supervisor: every survivor stops by itself (exit 3, peer lost), the logs
// and the requester's error name rank 2. The time from the kill to the
// last survivor's exit is measured and reported (not asserted).
func TestKillRankDetected(t *testing.T) {
	took := killAndMeasure(t, "e2e-detect")
	t.Logf("SIGKILL of rank 2 to the exit of every survivor: %v", took.Round(time.Millisecond))
}

func killAndMeasure(t *testing.T, jobName string, extra ...string) time.Duration {
	t.Helper()
	m := newManualJob(t, jobName, 4, append([]string{"--forward-time", "5ms"}, extra...)...)
	m.startAll(4)
	m.waitRunning(4)
	genErr := longRequest(t, m.client(), 4, 90*time.Second)
	victim := m.agents[2]
	killed := time.Now()
	if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var last time.Time
	var wg sync.WaitGroup
	for _, r := range []int{0, 1, 3} {
		a := m.agents[r]
		wg.Go(func() {
			<-a.exited
			now := time.Now()
			mu.Lock()
			if now.After(last) {
				last = now
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	took := last.Sub(killed)
	for _, r := range []int{0, 1, 3} {
		if code := m.agents[r].wait(time.Minute); code != 3 {
			t.Errorf("rank %d exited %d, want 3 (peer lost)", r, code)
		}
		if out := m.agents[r].log.String(); !strings.Contains(out, "rank 2") {
			t.Errorf("rank %d's log does not name rank 2", r)
		}
	}
	if err := <-genErr; err == nil || !strings.Contains(err.Error(), "rank 2") {
		t.Errorf("requester's error %v does not name rank 2", err)
	}
	return took
}

// TestKilledRank0BusStays: SIGKILL rank 0 of a job on a NATS server that
// outlives it (a standalone server, as in a multi-node job). The followers
// stop (peer lost), and the requester, whose keepalives now find nobody,
// ends with an error naming rank 0 instead of waiting out its --timeout
// (10 minutes).
func TestKilledRank0BusStays(t *testing.T) {
	m := newManualJob(t, "e2e-kill0-bus", 3, "--forward-time", "5ms")
	m.startAll(3)
	m.waitRunning(3)
	genErr := longRequest(t, m.client(), 3, 10*time.Minute)
	if err := m.agents[0].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for _, r := range []int{1, 2} {
		if code := m.agents[r].wait(2 * time.Minute); code != 3 {
			t.Errorf("rank %d exited %d, want 3 (peer lost)", r, code)
		}
	}
	select {
	case err := <-genErr:
		if err == nil || !strings.Contains(err.Error(), `rank 0 of job "e2e-kill0-bus" is gone`) {
			t.Errorf("requester's error: %v, want one saying rank 0 is gone", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("requester still waiting 2 minutes after the followers stopped")
	}
}

// TestDetectionTimes repeats the kill TPC_DETECTION_RUNS times and reports
// the median and maximum detection time (for docs/benchmarks.md). Extra
// agent flags come from TPC_DETECTION_FLAGS (e.g. "--heartbeat-timeout 0"
// for memberlist alone).
func TestDetectionTimes(t *testing.T) {
	runs, _ := strconv.Atoi(os.Getenv("TPC_DETECTION_RUNS"))
	if runs <= 0 {
		t.Skip("set TPC_DETECTION_RUNS=20 to measure the detection time distribution")
	}
	var times []time.Duration
	for i := range runs {
		ok := t.Run(fmt.Sprint(i), func(t *testing.T) {
			times = append(times, killAndMeasure(t, fmt.Sprintf("e2e-detect-%d", i), strings.Fields(os.Getenv("TPC_DETECTION_FLAGS"))...))
		})
		if !ok {
			t.FailNow()
		}
	}
	slices.Sort(times)
	t.Logf("detection over %d kills: median %v, min %v, max %v, all %v", runs,
		stats.Median(times).Round(time.Millisecond), times[0].Round(time.Millisecond), times[len(times)-1].Round(time.Millisecond), times)
}

// TestDuplicateRankRefused: a second agent claiming a taken rank exits 2
// naming both claimants; the job goes on.
func TestDuplicateRankRefused(t *testing.T) {
	m := newManualJob(t, "e2e-dup", 2, "--forward-time", "2ms")
	m.startAll(2)
	m.waitRunning(2)
	dup := startAgent(t, 1, append([]string{"--log-format", "text"}, append(slices.Clone(m.common), "--bind", "127.0.0.1:0", "--join", m.rank0, "--rank-claim-wait", "2s")...)...)
	if code := dup.wait(2 * time.Minute); code != 2 {
		t.Fatalf("duplicate exited %d, want 2", code)
	}
	if out := dup.log.String(); !regexp.MustCompile(`rank 1 is held by e2e-dup-r1-\w+`).MatchString(out) || !strings.Contains(out, "gives way") {
		t.Errorf("duplicate's error does not name the holder and itself:\n%s", out)
	}
	got, err := m.client().generate(context.Background(), "--prompt", "1,2", "--max-tokens", "4")
	if err != nil || len(got.Tokens) == 0 {
		t.Fatalf("job after the refusal: %+v %v", got, err)
	}
	for r, a := range m.agents {
		if !a.running() {
			t.Errorf("rank %d stopped", r)
		}
	}
}

// TestWorldSizeMismatchRefused: an agent configured for another world size
// is refused; its error names both sides.
func TestWorldSizeMismatchRefused(t *testing.T) {
	m := newManualJob(t, "e2e-world", 2, "--forward-time", "2ms")
	m.startAll(2)
	m.waitRunning(2)
	odd := startAgent(t, 2, "--log-format", "text", "--job", "e2e-world", "--world-size", "3", "--nats", m.nats, "--local",
		"--bind", "127.0.0.1:0", "--join", m.rank0, "--rendezvous-timeout", "3s")
	if code := odd.wait(time.Minute); code == 0 {
		t.Fatal("mismatched agent exited 0")
	}
	if out := odd.log.String(); !strings.Contains(out, "world size mismatch") || !strings.Contains(out, "world size 2") {
		t.Errorf("refusal does not name both world sizes:\n%s", out)
	}
	for r, a := range m.agents {
		if !a.running() {
			t.Errorf("rank %d stopped", r)
		}
	}
}

// TestWrongGossipKeyRefused: with encrypted gossip, an agent with another
// key cannot join, and says why.
func TestWrongGossipKeyRefused(t *testing.T) {
	dir := t.TempDir()
	key := func(name string, b byte) string {
		p := filepath.Join(dir, name)
		k := make([]byte, 32)
		for i := range k {
			k[i] = b + byte(i)
		}
		if err := os.WriteFile(p, []byte(base64.StdEncoding.EncodeToString(k)+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good, bad := key("good.key", 1), key("bad.key", 100)
	m := newManualJob(t, "e2e-key", 3, "--forward-time", "2ms")
	m.start(0, "--gossip-key-file", good)
	m.start(1, "--gossip-key-file", good)
	intruder := m.start(2, "--gossip-key-file", bad, "--rendezvous-timeout", "4s")
	if code := intruder.wait(time.Minute); code == 0 {
		t.Fatal("agent with the wrong key exited 0")
	}
	if out := intruder.log.String(); !strings.Contains(out, "missing ranks [0 1]") || !strings.Contains(out, "gossip-key-file") {
		t.Errorf("wrong-key agent does not explain its failure:\n%s", out)
	}
	// The right key joins the two that are waiting.
	m.start(2, "--gossip-key-file", good)
	m.waitRunning(3)
}

// TestWaitPolicyResumes: with --on-peer-loss wait, kill a follower
// mid-generation and restart it; every request submitted before the kill
// completes with the same tokens as an undisturbed run.
func TestWaitPolicyResumes(t *testing.T) {
	reqs := workload(4)
	for i := range reqs {
		// Long enough to be in flight across the kill and the re-formation.
		reqs[i].maxTokens, reqs[i].extra = 200+20*i, []string{"--ignore-eos"}
	}
	flags := []string{"--forward-time", "10ms", "--on-peer-loss", "wait"}

	ref := launch(t, append([]string{"--nproc", "4", "--job", "e2e-wait-ref"}, flags...)...)
	want := runAll(t, ref, reqs)
	if _, err := ref.stop(syscall.SIGTERM, 30*time.Second); err != nil {
		t.Fatalf("reference job: %v", err)
	}

	m := newManualJob(t, "e2e-wait", 4, flags...)
	m.startAll(4)
	m.waitRunning(4)
	c := m.client()
	done := make(chan []generated, 1)
	go func() { done <- runAll(t, c, reqs) }()
	poll.UntilDetail(t, 60*time.Second, "all requests decoding", func() (bool, string) {
		ranks, err := c.status()
		return err == nil && len(ranks) == 4 && ranks[0].Rows == len(reqs) && ranks[0].Step > 5, fmt.Sprintf("%+v %v", ranks, err)
	})
	victim := m.agents[2]
	if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-victim.exited
	// Between epochs the survivors still answer status, and rank 0 the
	// requesters' keepalives (or they would give up on it).
	poll.UntilDetail(t, 2*time.Minute, "rank 0 reporting the re-formation", func() (bool, string) {
		ranks, err := c.status()
		return err == nil && len(ranks) == 3 && ranks[0].Rank == 0 && ranks[0].State == "reforming", fmt.Sprintf("%+v %v", ranks, err)
	})
	m.start(2)

	var got []generated
	select {
	case got = <-done:
	case <-time.After(3 * time.Minute):
		t.Fatal("requests did not complete after the rank came back")
	}
	for i := range reqs {
		if fmt.Sprint(got[i]) != fmt.Sprint(want[i]) {
			t.Errorf("request %d: got %v, undisturbed run %v", i, got[i], want[i])
		}
	}
	ranks, err := c.status()
	if err != nil || len(ranks) != 4 || ranks[0].Epoch == 0 {
		t.Errorf("after the re-formation: %+v %v (want 4 ranks in epoch > 0)", ranks, err)
	}
	// Rank 0 held every request across the loss and resumed them.
	if held := regexp.MustCompile(`requests_held=(\d+)`).FindStringSubmatch(m.agents[0].log.String()); held == nil || held[1] != fmt.Sprint(len(reqs)) {
		t.Errorf("rank 0 did not report holding the %d requests across the loss (got %v)", len(reqs), held)
	}
	for r, a := range m.agents {
		if !a.running() {
			t.Errorf("rank %d stopped", r)
		}
	}
}

// TestRank0RestartReforms: agents started by hand under --on-peer-loss
// wait, with LAN timings; rank 0 has no --join. Rank 0 is killed and started
// again with the same command: the followers, which keep rejoining their
// seeds while a rank is missing, find it and the world re-forms. The time
// from the restart to the re-formed world is reported, not asserted.
func TestRank0RestartReforms(t *testing.T) {
	m := newManualJob(t, "e2e-r0restart", 3, "--forward-time", "5ms", "--on-peer-loss", "wait", "--local=false")
	m.startAll(3)
	m.waitRunning(3)
	c := m.client()
	args := []string{"--prompt", "7,8,9", "--max-tokens", "12", "--seed", "3", "--temperature", "0.8"}
	before, err := c.generate(t.Context(), args...)
	if err != nil {
		t.Fatal(err)
	}
	old := m.agents[0]
	if err := old.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-old.exited
	poll.UntilDetail(t, time.Minute, "the followers re-forming", func() (bool, string) {
		ranks, err := c.status()
		return err == nil && len(ranks) == 2 && ranks[0].State == "reforming", fmt.Sprintf("%+v %v", ranks, err)
	})
	restarted := time.Now()
	m.start(0)
	poll.UntilDetail(t, 2*time.Minute, "the world re-formed around the restarted rank 0", func() (bool, string) {
		ranks, err := c.status()
		ok := err == nil && len(ranks) == 3
		for _, r := range ranks {
			ok = ok && (r.State == "ready" || r.State == "running")
		}
		return ok, fmt.Sprintf("%+v %v", ranks, err)
	})
	t.Logf("rank 0 restarted with its original flags: world re-formed %v later", time.Since(restarted).Round(10*time.Millisecond))
	after, err := c.generate(t.Context(), args...)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("seeded request after the restart %v, before %v", after, before)
	}
}

// TestFrozenFollowerNotCountedPresent: under --on-peer-loss wait, a
// follower frozen with SIGSTOP is lost to its heartbeats long before
// membership declares it dead (it is only suspect meanwhile). Rank 0 must
// not re-form the world with it: it refuses new requests while it waits,
// and once the frozen process is replaced, the world re-forms once, in
// epoch 1.
func TestFrozenFollowerNotCountedPresent(t *testing.T) {
	m := newManualJob(t, "e2e-frozen", 3, "--forward-time", "5ms", "--on-peer-loss", "wait", "--local=false")
	m.startAll(3)
	m.waitRunning(3)
	c := m.client()
	frozen := m.agents[2]
	if err := frozen.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	poll.UntilDetail(t, time.Minute, "rank 0 waiting for the world to re-form", func() (bool, string) {
		ranks, err := c.status()
		return err == nil && len(ranks) > 0 && ranks[0].Rank == 0 && ranks[0].State == "reforming", fmt.Sprintf("%+v %v", ranks, err)
	})
	if _, err := c.generate(t.Context(), "--prompt", "1,2", "--max-tokens", "4", "--resume-window", "0"); err == nil || !strings.Contains(err.Error(), "unavailable") {
		t.Errorf("a request while rank 2 is frozen: %v, want it refused as unavailable", err)
	}
	if err := frozen.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-frozen.exited
	m.start(2)
	poll.UntilDetail(t, 2*time.Minute, "the world re-formed in epoch 1", func() (bool, string) {
		ranks, err := c.status()
		ok := err == nil && len(ranks) == 3
		for _, r := range ranks {
			ok = ok && r.Epoch == 1 && (r.State == "ready" || r.State == "running")
		}
		return ok, fmt.Sprintf("%+v %v", ranks, err)
	})
	if n := strings.Count(m.agents[0].log.String(), `msg="world re-formed"`); n != 1 {
		t.Errorf("rank 0 re-formed the world %d times, want once", n)
	}
}
