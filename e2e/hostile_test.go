package e2e

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/internal/freeport"
	"github.com/tpcoord/tpcoord/internal/poll"
)

// TestGarbageAndReplayFlood floods the step subject with 10,000 garbage,
// corrupted, forged and replayed messages while requests decode: no rank
// crashes, every request completes, every rank ends with the same digest,
// and the refusals are counted (the forgeries, under launch's job key, as
// "mac").
func TestGarbageAndReplayFlood(t *testing.T) {
	j := launch(t, "--nproc", "4", "--job", "e2e-flood", "--forward-time", "2ms")
	// Rank credentials: the ready file's client ones may not touch steps.
	nc, err := nats.Connect(rankNATSURL(t, j.info.PIDs[1]))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	subject := "tpc.e2e-flood.step"

	// Capture real step messages to replay them later.
	steps := captureSteps(t, nc, subject)
	reqs := workload(8)
	done := make(chan []generated, 1)
	go func() { done <- runAll(t, j, reqs) }()
	steps.waitAndStop(4)
	floodSteps(t, nc, subject, steps, 10000)

	var got []generated
	select {
	case got = <-done:
	case <-time.After(3 * time.Minute):
		t.Fatal("requests did not complete")
	}
	checkResults(t, reqs, got)
	poll.UntilDetail(t, 60*time.Second, "all ranks running at the same step and digest", func() (bool, string) {
		ranks, err := j.status()
		if err != nil {
			return false, err.Error()
		}
		if len(ranks) != 4 {
			return false, fmt.Sprintf("%+v", ranks)
		}
		for _, r := range ranks {
			if r.State != "running" || r.Step != ranks[0].Step || r.Digest != ranks[0].Digest {
				return false, fmt.Sprintf("%+v", ranks)
			}
		}
		return true, ""
	})
	ranks, err := j.status()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range ranks[1:] {
		if r.Rejected["step"] == 0 || r.Rejected["duplicate"] == 0 || r.Rejected["mac"] == 0 {
			t.Errorf("rank %d counted no refused, duplicate or forged steps: %v", r.Rank, r.Rejected)
		}
	}
	if _, err := j.stop(syscall.SIGTERM, 30*time.Second); err != nil {
		t.Fatalf("launch exited with %v after SIGTERM", err)
	}
}

// stepCapture keeps copies of up to 64 real step messages seen on the
// step subject, to replay and corrupt.
type stepCapture struct {
	t   *testing.T
	sub *nats.Subscription

	mu       sync.Mutex
	captured [][]byte
}

func captureSteps(t *testing.T, nc *nats.Conn, subject string) *stepCapture {
	t.Helper()
	c := &stepCapture{t: t}
	var err error
	c.sub, err = nc.Subscribe(subject, func(m *nats.Msg) {
		c.mu.Lock()
		if len(c.captured) < 64 && len(m.Data) > 48 && string(m.Data[:4]) == "TPCS" {
			c.captured = append(c.captured, append([]byte(nil), m.Data...))
		}
		c.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// waitAndStop waits until at least n steps are captured and unsubscribes.
func (c *stepCapture) waitAndStop(n int) {
	c.t.Helper()
	poll.UntilDetail(c.t, 60*time.Second, "some real steps captured", func() (bool, string) {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.captured) >= n, fmt.Sprintf("%d captured", len(c.captured))
	})
	if err := c.sub.Unsubscribe(); err != nil {
		c.t.Fatal(err)
	}
}

// pick returns one of the captured steps at random.
func (c *stepCapture) pick(rng *rand.Rand) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.captured[rng.IntN(len(c.captured))]
}

// floodSteps publishes n hostile messages on the step subject, a fixed
// rotation of the kinds hostileStep makes, with a fixed seed.
func floodSteps(t *testing.T, nc *nats.Conn, subject string, steps *stepCapture, n int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	castagnoli := crc32.MakeTable(crc32.Castagnoli)
	for i := range n {
		if err := nc.Publish(subject, hostileStep(i%5, steps.pick(rng), rng, castagnoli)); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// hostileStep makes a message of the given kind (0 to 4) from a genuine
// step message, which it does not modify.
func hostileStep(kind int, genuine []byte, rng *rand.Rand, castagnoli *crc32.Table) []byte {
	var msg []byte
	switch kind {
	case 0: // random bytes
		msg = make([]byte, rng.IntN(200))
		for k := range msg {
			msg[k] = byte(rng.Uint32())
		}
	case 1: // a real step replayed: a duplicate
		msg = genuine
	case 2: // a real step with one bit flipped: checksum error
		msg = append([]byte(nil), genuine...)
		msg[rng.IntN(len(msg))] ^= 1 << rng.IntN(8)
	case 3: // truncated
		msg = genuine[:rng.IntN(len(genuine))]
	case 4: // a real step with a stale epoch and a valid checksum, its MAC not redone: forged
		msg = append([]byte(nil), genuine[:len(genuine)-4]...)
		binary.LittleEndian.PutUint32(msg[16:], 0xffffffff)
		msg = binary.LittleEndian.AppendUint32(msg, crc32.Checksum(msg, castagnoli))
	}
	return msg
}

// natsServer is an external nats-server process (Debian's package).
type natsServer struct {
	t    *testing.T
	port int
	cmd  *exec.Cmd
	log  *syncBuffer
}

func startNATSServer(t *testing.T, port int) *natsServer {
	t.Helper()
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		t.Skip("nats-server is not installed (scripts/deps.sh installs Debian's package)")
	}
	s := &natsServer{t: t, port: port, log: &syncBuffer{}}
	s.cmd = exec.Command(bin, "-a", "127.0.0.1", "-p", strconv.Itoa(port))
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.kill() })
	poll.UntilDetail(t, 30*time.Second, "nats-server accepting connections", func() (bool, string) {
		nc, err := nats.Connect(s.url(), nats.Timeout(time.Second))
		if err != nil {
			return false, err.Error()
		}
		nc.Close()
		return true, ""
	})
	return s
}

func (s *natsServer) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", s.port) }

func (s *natsServer) kill() {
	if s.cmd.ProcessState == nil {
		_ = s.cmd.Process.Signal(syscall.SIGKILL)
		_ = s.cmd.Wait()
	}
}

// TestNATSServerRestart restarts an external nats-server while the ranks
// decode: they reconnect, fill any gap by replay, and go on in lockstep;
// requests submitted after the restart complete.
func TestNATSServerRestart(t *testing.T) {
	port := pickPort(t, false)
	srv := startNATSServer(t, port)
	j := launch(t, "--nproc", "3", "--job", "e2e-restart", "--forward-time", "5ms", "--nats", srv.url())

	// Requests in flight across the restart: their ranks must not hang or
	// diverge; a client may lose its reply stream, so only the ranks'
	// state is checked for these.
	inflight := make(chan struct{})
	go func() {
		defer close(inflight)
		ctx, cancel := contextWithTimeout(90 * time.Second)
		defer cancel()
		_, _ = j.generate(ctx, "--prompt", "5,6,7", "--max-tokens", "400", "--ignore-eos", "--timeout", "60s")
	}()
	poll.UntilDetail(t, 60*time.Second, "decoding under way", func() (bool, string) {
		ranks, err := j.status()
		return err == nil && len(ranks) == 3 && ranks[0].Step > 20, fmt.Sprintf("%+v %v", ranks, err)
	})
	srv.kill()
	// The restarted server (stopped by its own cleanup) takes the same
	// port: it is the server the ranks must reconnect to, and the one the
	// status and generate commands below reach through the job's URL.
	restarted := startNATSServer(t, port)
	if j.info.NATSURL != restarted.url() {
		t.Fatalf("the job uses NATS at %s, not the restarted server at %s: the restart tests nothing", j.info.NATSURL, restarted.url())
	}
	poll.UntilDetail(t, 60*time.Second, "every rank reconnected and answering", func() (bool, string) {
		ranks, err := j.status()
		return err == nil && len(ranks) == 3, fmt.Sprintf("%+v %v", ranks, err)
	})

	reqs := workload(4)
	checkResults(t, reqs, runAll(t, j, reqs))
	poll.UntilDetail(t, 90*time.Second, "all ranks running at the same step and digest after the restart", func() (bool, string) {
		ranks, err := j.status()
		if err != nil || len(ranks) != 3 {
			return false, fmt.Sprintf("%+v %v", ranks, err)
		}
		for _, r := range ranks {
			if r.State != "running" || r.Step != ranks[0].Step || r.Digest != ranks[0].Digest {
				return false, fmt.Sprintf("%+v", ranks)
			}
		}
		return true, ""
	})
	<-inflight
	if ranks, err := j.status(); err == nil {
		for _, r := range ranks {
			t.Logf("rank %d: step %d, counters %v", r.Rank, r.Step, r.Rejected)
		}
	}
	if _, err := j.stop(syscall.SIGTERM, 30*time.Second); err != nil {
		t.Fatalf("launch exited with %v after SIGTERM", err)
	}
}

// pickPort is a loopback port free now for a server or member started
// later (free for UDP too if udp: memberlist binds both), outside the
// kernel's ephemeral range, where the job's own port-0 binds and connects
// could take it first (see freeport).
func pickPort(t *testing.T, udp bool) int {
	t.Helper()
	p, err := freeport.Pick("127.0.0.1", udp)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestForgedStepWhileIdle: in a job without a key (agents started by
// hand: launch keys every job), a client holding the job's NATS URL
// publishes the step after rank 0's last one, with the captured leader ID
// and a valid checksum, while the job is idle. The followers apply it;
// rank 0, idle, notices at their next heartbeat that they report a step
// it never published, and stops naming a diverged rank. (With a key the
// forgery is refused on arrival: TestForgedStepRefused.)
func TestForgedStepWhileIdle(t *testing.T) {
	// Patient heartbeats: a loaded machine must not turn this test into
	// one of a lost rank (it once did, at load 15-23, with the default 1 s).
	m := newManualJob(t, "e2e-forge", 3, "--forward-time", "1ms", "--heartbeat-timeout", "10s")
	m.startAll(3)
	m.waitRunning(3)
	j := m.client()
	nc, err := nats.Connect(j.info.NATSURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	subject := "tpc." + j.info.Job + ".step"
	steps := captureSteps(t, nc, subject)
	if _, err := j.generate(t.Context(), "--prompt", "5,6", "--max-tokens", "8", "--ignore-eos"); err != nil {
		t.Fatal(err)
	}
	steps.waitAndStop(2)
	codec := broadcast.NewCodec(broadcast.JobHash(j.info.Job), nil)
	last := steps.last(codec) // its epoch and leader: the capture may miss the latest steps
	var idle uint64           // rank 0's last step, which every rank applied
	poll.UntilDetail(t, 30*time.Second, "the job idle at rank 0's last step", func() (bool, string) {
		st, err := j.status()
		ok := err == nil && len(st) == 3 && st[0].Rows == 0 && st[1].Step == st[0].Step && st[2].Step == st[0].Step
		if ok {
			idle = st[0].Step
		}
		return ok, fmt.Sprint(st, err)
	})
	forged := broadcast.Step{Epoch: last.Epoch, Step: idle + 1, Leader: last.Leader}
	if err := nc.Publish(subject, codec.AppendStep(nil, &forged)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	code := m.agents[0].wait(60 * time.Second)
	t.Logf("rank 0 stopped %v after the forged step", time.Since(start).Round(10*time.Millisecond))
	if out := m.agents[0].log.String(); code != 4 || !strings.Contains(out, "diverged") {
		t.Fatalf("rank 0 exited %d; want 4 (aborted) naming a diverged rank:\n%s", code, tail(out, 15))
	}
}

// last is the latest captured step that decodes with codec.
func (c *stepCapture) last(codec *broadcast.Codec) broadcast.Step {
	c.mu.Lock()
	defer c.mu.Unlock()
	var last broadcast.Step
	for _, data := range c.captured {
		var st broadcast.Step
		if codec.DecodeStep(data, &st) == nil && st.Step > last.Step {
			last = st
		}
	}
	return last
}
