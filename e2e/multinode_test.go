package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The two-node example (configs/systemd/examples/two-node) names its hosts
// 10.0.0.1 and 10.0.0.2 and its files /etc/tpcoord/…; the test moves them to
// addresses that exist only inside its namespaces and to a temp directory.
const (
	exampleDir    = "../configs/systemd/examples/two-node"
	exampleSubnet = "10.0.0."
	nsSubnet      = "10.77.0."
)

// host is one network namespace standing in for a machine.
type host struct {
	ns, addr string
}

func (h host) cmd(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", h.ns, name}, args...)...)
}

func (h host) natsURL() string { return "nats://" + h.addr + ":4222" }

// ipRun runs ip(8) and returns its combined output as the error's text.
func ipRun(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// twoHosts makes two network namespaces joined by a veth pair, with
// nsSubnet.1 and nsSubnet.2 on its ends and loopback up. Both ends are
// created inside the namespaces, so nothing is added to the test's own
// network namespace. It skips the test where namespaces cannot be made.
func twoHosts(t *testing.T) (a, b host) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("multi-node test needs root to create network namespaces")
	}
	if out, err := exec.Command("ip", "-V").CombinedOutput(); err != nil {
		t.Skipf("iproute2 is not usable (ip -V: %v: %s)", err, out)
	}
	id := os.Getpid() % 100000
	a = host{ns: fmt.Sprintf("tpc-e2e-%d-a", id), addr: nsSubnet + "1"}
	b = host{ns: fmt.Sprintf("tpc-e2e-%d-b", id), addr: nsSubnet + "2"}
	if err := ipRun("netns", "add", a.ns); err != nil {
		t.Skipf("cannot create a network namespace: %v", err)
	}
	t.Cleanup(func() {
		if err := ipRun("netns", "del", a.ns); err != nil {
			t.Log(err)
		}
	})
	if err := ipRun("netns", "add", b.ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ipRun("netns", "del", b.ns); err != nil {
			t.Log(err)
		}
	})
	veth := fmt.Sprintf("tpv%d", id) // interface names: at most 15 bytes
	if err := ipRun("link", "add", veth+"a", "netns", a.ns, "type", "veth", "peer", "name", veth+"b", "netns", b.ns); err != nil {
		t.Fatal(err)
	}
	for _, h := range []struct {
		host
		dev string
	}{{a, veth + "a"}, {b, veth + "b"}} {
		for _, args := range [][]string{
			{"-n", h.ns, "link", "set", "lo", "up"},
			{"-n", h.ns, "addr", "add", h.addr + "/24", "dev", h.dev},
			{"-n", h.ns, "link", "set", h.dev, "up"},
		} {
			if err := ipRun(args...); err != nil {
				t.Fatal(err)
			}
		}
	}
	return a, b
}

// proc is a process started in a namespace; exec keeps its PID (ip netns
// exec execs the command), so signals and exit codes are the program's.
type proc struct {
	name   string
	cmd    *exec.Cmd
	log    *syncBuffer
	exited chan struct{}
	err    error // valid after exited is closed
}

func startIn(t *testing.T, h host, name string, env []string, prog string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, log: &syncBuffer{}, exited: make(chan struct{})}
	p.cmd = h.cmd(prog, args...)
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.exited) }()
	// Registered after the namespaces' cleanups, so it runs before them.
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("%s output:\n%s", name, p.log.String())
		}
	})
	return p
}

func (p *proc) kill() {
	select {
	case <-p.exited:
	default:
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// exitCode waits up to limit for p to exit and returns its exit code.
func (p *proc) exitCode(t *testing.T, limit time.Duration) int {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(limit):
		t.Fatalf("%s did not exit within %v", p.name, limit)
	}
	var ee *exec.ExitError
	if p.err == nil {
		return 0
	}
	if !errors.As(p.err, &ee) {
		t.Fatalf("%s: %v", p.name, p.err)
	}
	return ee.ExitCode()
}

// exampleFile reads a file of the two-node example with its addresses and
// /etc/tpcoord paths moved to the test's.
func exampleFile(t *testing.T, rel, confDir string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(exampleDir, rel))
	if err != nil {
		t.Fatal(err)
	}
	s := strings.ReplaceAll(string(data), exampleSubnet, nsSubnet)
	return strings.ReplaceAll(s, "/etc/tpcoord/", confDir+"/")
}

// envFile parses a systemd EnvironmentFile= of the simple KEY=VALUE kind
// the examples use.
func envFile(t *testing.T, text string) []string {
	t.Helper()
	var env []string
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		if !strings.Contains(line, "=") {
			t.Fatalf("env file line %q is not KEY=VALUE", line)
		}
		env = append(env, line)
	}
	return env
}

// TestMultiNodeNamespaces runs the two-node example with two ranks per
// host: two network namespaces joined by a veth pair, a clustered
// nats-server in each (the example's nats-cluster.conf with the shipped
// users and permissions), ranks 0,1 on host A and 2,3 on host B configured
// as the units configure them (agent.yaml, tpcoord.env, rank-N.env). The
// ranks decode in lockstep across hosts; when host B's agents are killed,
// host A's exit 3 (peer lost).
func TestMultiNodeNamespaces(t *testing.T) {
	const natsBin = "/usr/sbin/nats-server"
	if _, err := os.Stat(natsBin); err != nil {
		t.Skipf("%s is missing (Debian's nats-server package): %v", natsBin, err)
	}
	a, b := twoHosts(t)
	conf := writeExampleConf(t)
	startRoutedNATS(t, natsBin, conf, a, b)
	c := &twoNodeJob{t: t, conf: conf, agents: startExampleAgents(t, conf, a, b)}
	waitFor(t, 120*time.Second, "all 4 ranks up, seen from host A", c.inLockstep(a, 0, "ready", "running"))

	// Requests from host B go through B's server to rank 0 on host A.
	reqs := workload(4)
	got := c.generateAll(b, reqs)
	checkResults(t, reqs, got)
	var steps uint64
	for _, g := range got {
		steps = max(steps, uint64(len(g.Tokens)))
	}
	// Both servers see the same four ranks at the same step and digest.
	waitFor(t, 90*time.Second, "all 4 ranks at the same step and digest, seen from host B", c.inLockstep(b, steps, "running"))
	waitFor(t, 90*time.Second, "all 4 ranks at the same step and digest, seen from host A", c.inLockstep(a, steps, "running"))
	if ranks, err := c.status(a); err == nil {
		t.Logf("in lockstep across hosts: %+v", ranks)
	}

	// Host B goes down hard: host A's ranks must notice and exit 3.
	for _, p := range c.agents[2:] {
		if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range c.agents[:2] {
		if code := p.exitCode(t, 120*time.Second); code != 3 {
			t.Errorf("%s exited with code %d after host B's ranks were killed, want 3 (peer lost)", p.name, code)
		}
	}
}

// writeExampleConf writes /etc/tpcoord of both hosts into a temp
// directory, the same files on each as in the example, and returns it.
func writeExampleConf(t *testing.T) string {
	t.Helper()
	conf := t.TempDir()
	if err := os.Chmod(conf, 0o755); err != nil { // readable by nats-server inside the namespace
		t.Fatal(err)
	}
	natsConf, err := os.ReadFile("../configs/nats/nats-server.conf")
	if err != nil {
		t.Fatal(err)
	}
	key, jobKey := make([]byte, 32), make([]byte, 32)
	for _, k := range [][]byte{key, jobKey} {
		if _, err := rand.Read(k); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		"nats-server.conf":  string(natsConf),
		"nats-cluster.conf": exampleFile(t, "nats-cluster.conf", conf),
		"nats-rank0.pw":     "CHANGE-ME-rank0\n",
		"nats-rank.pw":      "CHANGE-ME-rank\n",
		"nats-client.pw":    "CHANGE-ME-client\n",
		"gossip.key":        base64.StdEncoding.EncodeToString(key) + "\n",
		"job.key":           base64.StdEncoding.EncodeToString(jobKey) + "\n",
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(conf, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return conf
}

// startRoutedNATS starts one NATS server per host with the example's
// cluster configuration and waits until each is routed to the other.
func startRoutedNATS(t *testing.T, natsBin, conf string, a, b host) {
	t.Helper()
	servers := map[string]*proc{}
	for _, h := range []host{a, b} {
		servers[h.ns] = startIn(t, h, "nats-server on "+h.addr, os.Environ(), natsBin, "-c", filepath.Join(conf, "nats-cluster.conf"))
	}
	for _, h := range []host{a, b} {
		s := servers[h.ns]
		waitFor(t, 60*time.Second, "nats-server on "+h.addr+" ready and routed to the other", func() (bool, string) {
			select {
			case <-s.exited:
				t.Fatalf("nats-server on %s exited: %v\n%s", h.addr, s.err, s.log.String())
			default:
			}
			// A route line names the peer's address (a server also routes
			// to itself once, through its own address, and drops it).
			other := a.addr
			if h == a {
				other = b.addr
			}
			out := s.log.String()
			for _, line := range strings.Split(out, "\n") {
				if strings.Contains(line, other+":") && strings.Contains(line, "Route connection created") {
					return true, ""
				}
			}
			return false, out
		})
	}
}

// startExampleAgents starts ranks 0,1 on host A and 2,3 on host B, each
// configured from agent.yaml, its host's tpcoord.env and a rank-N.env of
// the example. Overrides: a world of 4, each host's own NATS server (so
// steps cross the route), a small vocabulary for two shared cores.
func startExampleAgents(t *testing.T, conf string, a, b host) []*proc {
	t.Helper()
	yaml, err := filepath.Abs("../configs/agent.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	layout := []struct {
		rank     int
		host     host
		node     string
		rankFile string // the example rank whose bind address it takes
	}{
		{0, a, "node-a", "rank-0.env"},
		{1, a, "node-a", "rank-1.env"},
		{2, b, "node-b", "rank-4.env"},
		{3, b, "node-b", "rank-5.env"},
	}
	agents := make([]*proc, len(layout))
	for i, l := range layout {
		env := append(os.Environ(), "TPC_CONFIG="+yaml, "GOTRACEBACK=crash")
		env = append(env, envFile(t, exampleFile(t, l.node+"/tpcoord.env", conf))...)
		env = append(env, envFile(t, exampleFile(t, l.node+"/"+l.rankFile, conf))...)
		env = append(env, "TPC_WORLD_SIZE=4", "TPC_NATS="+l.host.natsURL(), "TPC_VOCAB=4096",
			"TPC_FORWARD_TIME=5ms", "TPC_LOG_FORMAT=text")
		agents[i] = startIn(t, l.host, fmt.Sprintf("rank %d on %s", l.rank, l.host.addr), env,
			tpcoordBin, "agent", "--rank", strconv.Itoa(l.rank))
	}
	return agents
}

// twoNodeJob is the example's job of four agents on two hosts, reached
// as the example's client user through either host's NATS server.
type twoNodeJob struct {
	t      *testing.T
	conf   string
	agents []*proc
}

// client returns the connection flags of a client on host h.
func (c *twoNodeJob) client(h host) []string {
	return []string{"--nats", h.natsURL(), "--nats-user", "client", "--nats-password-file", filepath.Join(c.conf, "nats-client.pw"), "--job", authJob}
}

// status asks every rank for its status through h's server.
func (c *twoNodeJob) status(h host) ([]rankStatus, error) {
	cmd := h.cmd(tpcoordBin, append([]string{"status", "--json"}, c.client(h)...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("status via %s: %w: %s", h.addr, err, stderr.String())
	}
	var st struct {
		Ranks []rankStatus `json:"ranks"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return nil, fmt.Errorf("status output %q: %w", out, err)
	}
	return st.Ranks, nil
}

// running returns an error naming the first agent that exited.
func (c *twoNodeJob) running() error {
	for _, p := range c.agents {
		select {
		case <-p.exited:
			if p.err == nil {
				return fmt.Errorf("%s exited (status 0)", p.name)
			}
			return fmt.Errorf("%s exited: %w", p.name, p.err)
		default:
		}
	}
	return nil
}

// inLockstep: every rank answers through h's server, in one of states,
// at the same step (at least minStep) with the same digest.
func (c *twoNodeJob) inLockstep(h host, minStep uint64, states ...string) func() (bool, string) {
	return func() (bool, string) {
		if err := c.running(); err != nil {
			c.t.Fatal(err)
		}
		ranks, err := c.status(h)
		if err != nil || len(ranks) != 4 {
			return false, fmt.Sprintf("%+v %v", ranks, err)
		}
		for _, r := range ranks {
			if !slices.Contains(states, r.State) || r.Step != ranks[0].Step || r.Digest != ranks[0].Digest || r.Step < minStep {
				return false, fmt.Sprintf("%+v", ranks)
			}
		}
		return true, ""
	}
}

// generateAll runs reqs at once from host h and returns their results in
// order; any failed request fails the test.
func (c *twoNodeJob) generateAll(h host, reqs []request) []generated {
	c.t.Helper()
	got := make([]generated, len(reqs))
	errs := make([]error, len(reqs))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for i, r := range reqs {
		wg.Go(func() {
			args := append([]string{"generate", "--json"}, c.client(h)...)
			args = append(args, "--prompt", r.prompt, "--max-tokens", strconv.Itoa(r.maxTokens), "--seed", strconv.Itoa(r.seed), "--temperature", "0.8")
			cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", h.ns, tpcoordBin}, args...)...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				errs[i] = fmt.Errorf("generate %s: %w: %s", r.prompt, err, stderr.String())
				return
			}
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			errs[i] = json.Unmarshal([]byte(lines[len(lines)-1]), &got[i])
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		c.t.Fatal(err)
	}
	return got
}
