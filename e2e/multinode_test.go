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
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tpcoord/tpcoord/internal/poll"
)

// The three-node example (configs/systemd/examples/three-node) names its
// hosts 10.0.0.1-3 and its files /etc/tpcoord/…; the test moves them to
// addresses that exist only inside its namespaces (nsSubnet) and to a
// directory per host.
const (
	exampleDir    = "../configs/systemd/examples/three-node"
	exampleSubnet = "10.0.0."
	natsServerBin = "/usr/sbin/nats-server"
)

// clusterLayout is where the test runs each rank of its 4-rank job on the
// example's three hosts, and the example's rank-N.env that configures it
// (its bind address): host C's one rank takes the bind address of the
// example's rank 4.
var clusterLayout = []struct {
	host    int
	rankEnv string
}{
	{0, "host-a/rank-0.env"},
	{0, "host-a/rank-1.env"},
	{1, "host-b/rank-2.env"},
	{2, "host-c/rank-4.env"},
}

// exampleFile reads a file of the three-node example with its addresses
// and /etc/tpcoord paths moved to the test's, for host h.
func exampleFile(t *testing.T, rel string, h *host) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(exampleDir, rel))
	if err != nil {
		t.Fatal(err)
	}
	s := strings.ReplaceAll(string(data), exampleSubnet, nsSubnet)
	return strings.ReplaceAll(s, "/etc/tpcoord/", h.conf+"/")
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

// envValue is key's value in env (the last one wins, as in systemd).
func envValue(t *testing.T, env []string, key string) string {
	t.Helper()
	v, found := "", false
	for _, kv := range env {
		if k, val, _ := strings.Cut(kv, "="); k == key {
			v, found = val, true
		}
	}
	if !found {
		t.Fatalf("no %s in %q", key, env)
	}
	return v
}

// writeHostConf writes each host's /etc/tpcoord into its own directory:
// the same configuration and secrets on every host, as the example says,
// and each host's TLS files from scripts/nats-certs.sh (which the test
// thereby checks).
func writeHostConf(t *testing.T, hosts []*host) {
	t.Helper()
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
	certs := t.TempDir()
	args := []string{certs}
	for _, h := range hosts {
		args = append(args, "host-"+h.name+"="+h.addr)
	}
	if out, err := exec.Command("../scripts/nats-certs.sh", args...).CombinedOutput(); err != nil {
		t.Fatalf("scripts/nats-certs.sh %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	for _, h := range hosts {
		h.conf = t.TempDir()
		files := map[string]string{
			"nats-server.conf":  string(natsConf),
			"nats-cluster.conf": exampleFile(t, "nats-cluster.conf", h),
			"nats-rank0.pw":     "CHANGE-ME-rank0\n",
			"nats-rank.pw":      "CHANGE-ME-rank\n",
			"nats-client.pw":    "CHANGE-ME-client\n",
			"gossip.key":        base64.StdEncoding.EncodeToString(key) + "\n",
			"job.key":           base64.StdEncoding.EncodeToString(jobKey) + "\n",
		}
		for _, f := range []string{"ca.pem", "server.pem", "server-key.pem"} {
			data, err := os.ReadFile(filepath.Join(certs, "host-"+h.name, f))
			if err != nil {
				t.Fatal(err)
			}
			files["nats/"+f] = string(data)
		}
		for name, data := range files {
			p := filepath.Join(h.conf, name)
			if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// cluster is the example on three hosts: a clustered nats-server on each
// and a 4-rank job across them (clusterLayout), every process started as
// its unit starts it (tpcoord-nats.service, tpcoord@N.service) and
// restarted by the test where systemd would restart the unit.
type cluster struct {
	t       *testing.T
	hosts   []*host
	servers []*proc // by host
	agents  []*proc // by rank; nil while the test holds a rank down
	started []*proc // every agent process the test started
}

// startCluster makes the hosts, their configuration, the NATS cluster and
// the job, and waits until every rank is up, seen from every host.
func startCluster(t *testing.T) *cluster {
	t.Helper()
	if _, err := os.Stat(natsServerBin); err != nil {
		t.Skipf("%s is missing (Debian's nats-server package; scripts/deps.sh installs it): %v", natsServerBin, err)
	}
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("openssl, which scripts/nats-certs.sh runs, is missing (scripts/deps.sh installs it)")
	}
	c := &cluster{t: t, hosts: makeHosts(t, "a", "b", "c")}
	writeHostConf(t, c.hosts)
	c.servers = make([]*proc, len(c.hosts))
	for i := range c.hosts {
		c.startServer(i)
	}
	for i := range c.hosts {
		c.waitRouted(i)
	}
	c.requireTLS(c.hosts[1], c.hosts[0].addr+":6222", "route")
	c.requireTLS(c.hosts[1], c.hosts[0].addr+":4222", "client")
	c.agents = make([]*proc, len(clusterLayout))
	for r := range clusterLayout {
		c.startAgent(r)
	}
	for _, h := range c.hosts {
		poll.UntilDetail(t, 2*time.Minute, "all 4 ranks up, seen from host "+h.name, c.inLockstep(h, 0, "ready", "running"))
	}
	return c
}

// startServer starts host i's nats-server as tpcoord-nats.service does:
// nats-server -c $TPC_NATS_CONFIG, from the example's nats.env.
func (c *cluster) startServer(i int) {
	h := c.hosts[i]
	conf := envValue(c.t, envFile(c.t, exampleFile(c.t, "nats.env", h)), "TPC_NATS_CONFIG")
	c.servers[i] = startIn(c.t, h, "nats-server on "+h.addr, os.Environ(), natsServerBin, "-c", conf)
}

// waitRouted waits until host i's server has made or accepted a route to
// every other host's. (A server also routes to itself once, through its
// own address, and drops it.) Whether the routes carry the job's messages
// is checked by the job: status through each server sees every rank.
func (c *cluster) waitRouted(i int) {
	s := c.servers[i]
	poll.UntilDetail(c.t, time.Minute, s.name+" routed to the others", func() (bool, string) {
		if !s.alive() {
			c.t.Fatalf("%s exited: %v\n%s", s.name, s.err, s.log.String())
		}
		out := s.log.String()
		for j, other := range c.hosts {
			routed := regexp.MustCompile(`(?m)` + regexp.QuoteMeta(other.addr) + `:\d+ - rid:\d+ - Route connection created`)
			if j != i && !routed.MatchString(out) {
				return false, out
			}
		}
		return true, ""
	})
}

// requireTLS connects from host from to a server's port in plain TCP and
// checks that the server wants TLS: a client port's first line, its INFO,
// demands it; a route port with TLS says nothing in plain text and waits
// for a TLS handshake (it drops the connection after its TLS timeout),
// where a route port without TLS would send its INFO at once.
func (c *cluster) requireTLS(from *host, addr, what string) {
	hostPort := strings.Replace(addr, ":", "/", 1)
	out, err := from.cmd("timeout", "10", "bash", "-c", "exec 3<>/dev/tcp/"+hostPort+" && head -n 1 <&3").CombinedOutput()
	if err != nil {
		c.t.Fatalf("reading the %s port at %s: %v: %s", what, addr, err, out)
	}
	info := string(out)
	if what == "route" && info != "" {
		c.t.Fatalf("the route port at %s spoke plain text to a plain connection (no TLS first): %s", addr, info)
	}
	if what != "route" && (!strings.HasPrefix(info, "INFO ") || !strings.Contains(info, `"tls_required":true`)) {
		c.t.Fatalf("the %s port at %s does not require TLS; its INFO: %s", what, addr, info)
	}
}

// startAgent starts rank r as tpcoord@r.service does (agent.yaml,
// tpcoord.env, then rank-N.env; tpcoord agent --rank r), on its host. The
// test's own settings: a world of 4, a small vocabulary and a short
// forward pass for two shared cores, text logs to read.
func (c *cluster) startAgent(r int) {
	l := clusterLayout[r]
	h := c.hosts[l.host]
	yaml, err := filepath.Abs("../configs/agent.example.yaml")
	if err != nil {
		c.t.Fatal(err)
	}
	env := append(os.Environ(), "TPC_CONFIG="+yaml, "GOTRACEBACK=crash")
	env = append(env, envFile(c.t, exampleFile(c.t, "tpcoord.env", h))...)
	env = append(env, envFile(c.t, exampleFile(c.t, l.rankEnv, h))...)
	env = append(env, "TPC_WORLD_SIZE=4", "TPC_VOCAB=4096", "TPC_FORWARD_TIME=5ms", "TPC_LOG_FORMAT=text")
	c.agents[r] = startIn(c.t, h, fmt.Sprintf("rank %d on %s", r, h.addr), env, tpcoordBin, "agent", "--rank", strconv.Itoa(r))
	c.started = append(c.started, c.agents[r])
}

// client returns the connection flags of a client on host h: the example's
// client user, through h's server only, over TLS.
func (c *cluster) client(h *host) []string {
	return []string{"--nats", "tls://" + h.addr + ":4222", "--nats-tls-ca", filepath.Join(h.conf, "nats/ca.pem"),
		"--nats-user", "client", "--nats-password-file", filepath.Join(h.conf, "nats-client.pw"), "--job", authJob}
}

// status asks every rank for its status through h's server, waiting up to
// 1 s for all four to answer.
func (c *cluster) status(h *host) ([]rankStatus, error) {
	cmd := h.cmd(tpcoordBin, append([]string{"status", "--json", "--wait", "1s"}, c.client(h)...)...)
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

// running fails the test if an agent the test did not stop has exited, or
// if the shipped NATS permissions refused any agent a message: a refused
// message is lost, and the job would stall or fail later for a reason its
// logs hide among others.
func (c *cluster) running() {
	for _, p := range c.agents {
		if p != nil && !p.alive() {
			c.t.Fatalf("%s exited: %v", p.name, p.err)
		}
	}
	for _, p := range c.started {
		log := p.log.String()
		if i := strings.Index(log, "ermissions violation"); i >= 0 {
			line, _, _ := strings.Cut(log[strings.LastIndexByte(log[:i], '\n')+1:], "\n")
			c.t.Fatalf("the NATS permissions refused %s a message: %s", p.name, line)
		}
	}
}

// inLockstep: every rank answers through h's server, in one of states,
// at the same step (at least minStep) with the same digest.
func (c *cluster) inLockstep(h *host, minStep uint64, states ...string) func() (bool, string) {
	return func() (bool, string) {
		c.running()
		ranks, err := c.status(h)
		if err != nil || len(ranks) != len(c.agents) {
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
// order, or every request's error. The processes end with the test.
func (c *cluster) generateAll(h *host, reqs []request) ([]generated, error) {
	got := make([]generated, len(reqs))
	errs := make([]error, len(reqs))
	ctx, cancel := context.WithTimeout(c.t.Context(), 3*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for i, r := range reqs {
		wg.Go(func() {
			args := append([]string{"generate", "--json"}, c.client(h)...)
			args = append(args, "--prompt", r.prompt, "--max-tokens", strconv.Itoa(r.maxTokens), "--seed", strconv.Itoa(r.seed), "--temperature", "0.8")
			args = append(args, r.extra...)
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
	return got, errors.Join(errs...)
}
