package e2e

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tpcoord/tpcoord/internal/poll"
)

// TestMultiNodeCluster runs the three-node example (configs/systemd/
// examples/three-node) on three network namespaces on a bridge: a
// clustered Debian nats-server on each host (the example's
// nats-cluster.conf: routes with a password and mutual TLS, clients over
// TLS, the shipped users and permissions; certificates from
// scripts/nats-certs.sh), and a 4-rank job under --on-peer-loss wait, ranks
// 0 and 1 on host A, 2 on B, 3 on C, configured as the units configure
// them. A seeded workload runs undisturbed, then across two faults:
//
//  1. the NATS servers rank 0 is connected to (one or two: it has two
//     connections) are killed (SIGKILL);
//  2. host C goes away: its link goes down and its nats-server and agent
//     are killed, then it comes back (link up, both started again).
//
// Each time the requests complete with the undisturbed run's tokens and
// the ranks end at one step and digest, seen through every server. How
// long each recovery took is logged, not asserted. Where systemd would
// restart a unit (Restart=on-failure after the kill; the units starting
// when host C boots), the test starts the process again itself.
func TestMultiNodeCluster(t *testing.T) {
	c := startCluster(t)
	b, hostC := c.hosts[1], c.hosts[2]
	reqs := workload(4)
	for i := range reqs {
		// Long enough to be decoding when the fault strikes and for a
		// while after the job recovers, even when a status poll (a
		// process in a namespace, over TLS) takes a second on a loaded
		// machine: at 5 ms a step, 3 s at the least. Every one runs to
		// its length.
		reqs[i].maxTokens, reqs[i].extra = 600+40*i, []string{"--ignore-eos"}
	}
	want, err := c.generateAll(b, reqs)
	if err != nil {
		t.Fatal(err)
	}
	checkResults(t, reqs, want)
	c.lockstepEverywhere("after the undisturbed run")

	// Clients use a server the fault leaves alone: a client whose server
	// dies loses the replies in flight (NATS has no redelivery).
	victims := c.rank0Servers()
	via := c.hosts[slices.IndexFunc(c.hosts, func(h *host) bool { return !slices.Contains(victims, h) })]
	got := c.across(via, reqs, func() { c.killServers(victims, via) })
	sameTokens(t, "across the kill of rank 0's NATS servers", got, want)
	c.lockstepEverywhere("after the kill of rank 0's NATS servers")

	held := len(c.agents[0].log.String())
	got = c.across(b, reqs, func() { c.hostAway(2, b) })
	sameTokens(t, "across host "+hostC.name+"'s loss", got, want)
	c.lockstepEverywhere("after host " + hostC.name + " came back")
	// Rank 0 held every request across the loss and resumed them.
	holds := regexp.MustCompile(`requests_held=(\d+)`).FindAllStringSubmatch(c.agents[0].log.String()[held:], -1)
	for _, m := range holds {
		if m[1] != fmt.Sprint(len(reqs)) {
			t.Errorf("rank 0 held %s requests across host %s's loss, want %d", m[1], hostC.name, len(reqs))
		}
	}
	if len(holds) == 0 {
		t.Errorf("rank 0 did not log holding the requests across host %s's loss", hostC.name)
	}
}

func sameTokens(t *testing.T, what string, got, want []generated) {
	t.Helper()
	for i := range want {
		if fmt.Sprint(got[i]) != fmt.Sprint(want[i]) {
			t.Errorf("request %d %s: %v, undisturbed run %v", i, what, got[i], want[i])
		}
	}
}

// lockstepEverywhere waits until every rank is at one step and digest,
// seen through each host's server (so every server routes to all ranks).
func (c *cluster) lockstepEverywhere(when string) {
	c.t.Helper()
	for _, h := range c.hosts {
		poll.UntilDetail(c.t, time.Minute, "all 4 ranks at one step and digest "+when+", seen from host "+h.name, c.inLockstep(h, 1, "running"))
	}
}

// rank0Servers returns the hosts whose NATS servers rank 0 is connected
// to. Rank 0 has two connections (its steps; everything else, the tokens
// it streams to clients among them), each to a server nats.go picked at
// random from its list: one host or two.
func (c *cluster) rank0Servers() []*host {
	c.t.Helper()
	peers, err := tcpPeers(c.hosts[clusterLayout[0].host], c.agents[0].cmd.Process.Pid, 4222)
	if err != nil || len(peers) == 0 {
		c.t.Fatalf("rank 0's NATS connections: %v %v", peers, err)
	}
	var hosts []*host
	for _, h := range c.hosts {
		if slices.Contains(peers, h.addr) {
			hosts = append(hosts, h)
		}
	}
	if len(hosts) == 0 || len(hosts) == len(c.hosts) {
		c.t.Fatalf("rank 0 is connected to %v: want one or two of the hosts' servers", peers)
	}
	return hosts
}

// across runs reqs from host h, calls fault once all of them are decoding,
// and returns their results.
func (c *cluster) across(h *host, reqs []request, fault func()) []generated {
	c.t.Helper()
	type result struct {
		got []generated
		err error
	}
	done := make(chan result, 1)
	go func() {
		got, err := c.generateAll(h, reqs)
		done <- result{got, err}
	}()
	poll.UntilDetail(c.t, time.Minute, "every request decoding", func() (bool, string) {
		c.running()
		ranks, err := c.status(h)
		ok := err == nil && len(ranks) == len(c.agents) && ranks[0].Rank == 0 && ranks[0].Rows == len(reqs) && ranks[0].Step > 5
		return ok, fmt.Sprintf("%+v %v", ranks, err)
	})
	fault()
	select {
	case r := <-done:
		if r.err != nil {
			c.running() // a refused message explains a lost request best
			c.t.Fatal(r.err)
		}
		return r.got
	case <-time.After(3 * time.Minute):
		c.t.Fatal("requests did not complete after the fault")
		return nil
	}
}

// position is where rank 0 was when a fault struck.
type position struct {
	epoch uint32
	step  uint64
}

func (c *cluster) rank0Position(h *host) position {
	c.t.Helper()
	ranks, err := c.status(h)
	if err != nil || len(ranks) == 0 || ranks[0].Rank != 0 {
		c.t.Fatalf("rank 0's position: %+v %v", ranks, err)
	}
	return position{ranks[0].Epoch, ranks[0].Step}
}

// resumed: every rank answers through h's server, running in one epoch
// (a later one than before's if laterEpoch), and each has applied at
// least 20 steps beyond before (or into a later epoch): more than rank 0
// may run ahead of its followers (--max-lag), so decoding has resumed
// rather than drained what was in flight.
func (c *cluster) resumed(h *host, before position, laterEpoch bool) func() (bool, string) {
	return func() (bool, string) {
		c.running()
		ranks, err := c.status(h)
		if err != nil || len(ranks) != len(c.agents) {
			return false, fmt.Sprintf("%+v %v", ranks, err)
		}
		e := ranks[0].Epoch
		base := uint64(0)
		if e == before.epoch {
			base = before.step
		}
		for _, r := range ranks {
			if r.State != "running" || r.Epoch != e || e < before.epoch || (laterEpoch && e == before.epoch) || r.Step < base+20 {
				return false, fmt.Sprintf("%+v", ranks)
			}
		}
		return true, ""
	}
}

// killServers SIGKILLs the nats-servers of hosts, and logs how long until
// rank 0 was connected again (its log) and every rank decoded again (seen
// through h's server); then starts them again.
func (c *cluster) killServers(hosts []*host, h *host) {
	c.t.Helper()
	before := c.rank0Position(h)
	from := len(c.agents[0].log.String())
	killed := time.Now()
	var names []string
	for _, v := range hosts {
		c.servers[slices.Index(c.hosts, v)].kill()
		names = append(names, v.name)
	}
	poll.UntilDetail(c.t, time.Minute, "every rank decoding again", c.resumed(h, before, false))
	took := time.Since(killed)
	after := c.rank0Position(h)
	reconnected := "not logged"
	if at, ok := lastLogTime(c.agents[0].log.String()[from:], "nats reconnected"); ok {
		reconnected = fmt.Sprintf("%.3f s", at.Sub(killed).Seconds())
	}
	c.t.Logf("recovery after killing rank 0's NATS servers (hosts %v): %.1f s until every rank decoded again (status polls); rank 0 reconnected after %s; epoch %d → %d",
		names, took.Seconds(), reconnected, before.epoch, after.epoch)
	// systemd: Restart=on-failure.
	for _, v := range hosts {
		c.startServer(slices.Index(c.hosts, v))
	}
	for _, v := range hosts {
		c.waitRouted(slices.Index(c.hosts, v))
	}
}

// hostAway takes host i off the network and kills its nats-server and
// agents, as when a machine dies; once rank 0 (seen through h's server)
// waits for the world to re-form, it brings the host back, and logs how
// long rank 0 took to notice the loss and the job to recover.
func (c *cluster) hostAway(i int, h *host) {
	c.t.Helper()
	gone := c.hosts[i]
	before := c.rank0Position(h)
	from := len(c.agents[0].log.String())
	cut := time.Now()
	// The link first: nothing the processes' deaths would send gets out.
	if err := gone.setLink(false); err != nil {
		c.t.Fatal(err)
	}
	c.servers[i].kill()
	var ranks []int
	for r, l := range clusterLayout {
		if l.host == i {
			c.agents[r].kill()
			c.agents[r], ranks = nil, append(ranks, r)
		}
	}
	poll.UntilDetail(c.t, time.Minute, "rank 0 waiting for the world to re-form", func() (bool, string) {
		c.running()
		st, err := c.status(h)
		return err == nil && len(st) > 0 && st[0].Rank == 0 && st[0].State == "reforming", fmt.Sprintf("%+v %v", st, err)
	})
	back := time.Now()
	if err := gone.setLink(true); err != nil {
		c.t.Fatal(err)
	}
	// systemd: the units start when the host boots.
	c.startServer(i)
	for _, r := range ranks {
		c.startAgent(r)
	}
	poll.UntilDetail(c.t, 2*time.Minute, "every rank decoding again in a new epoch", c.resumed(h, before, true))
	took := time.Since(back)
	log := c.agents[0].log.String()[from:]
	lost, ok1 := firstLogTime(log, "peer lost; waiting for the world to re-form")
	reformed, ok2 := lastLogTime(log, "world re-formed")
	if !ok1 || !ok2 {
		c.t.Fatalf("rank 0 logged no loss (%v) or no re-formation (%v) after host %s's loss", ok1, ok2, gone.name)
	}
	c.t.Logf("host %s lost: rank 0 held the job %.1f s after the cut (its log)", gone.name, lost.Sub(cut).Seconds())
	c.t.Logf("recovery after host %s came back: world re-formed after %.1f s (rank 0's log; %.1f s after the cut), every rank decoding again after %.1f s (status polls)",
		gone.name, reformed.Sub(back).Seconds(), reformed.Sub(cut).Seconds(), took.Seconds())
}

// firstLogTime and lastLogTime return the time of the first or last line
// of a text-format agent log whose message is msg.
func firstLogTime(log, msg string) (time.Time, bool) { return logTime(log, msg, false) }
func lastLogTime(log, msg string) (time.Time, bool)  { return logTime(log, msg, true) }

func logTime(log, msg string, last bool) (time.Time, bool) {
	var at time.Time
	found := false
	for _, line := range strings.Split(log, "\n") {
		stamp, rest, _ := strings.Cut(strings.TrimSpace(line), " ")
		if !strings.Contains(rest, `msg="`+msg+`"`) || !strings.HasPrefix(stamp, "time=") {
			continue
		}
		if t, err := time.Parse(time.RFC3339Nano, strings.TrimPrefix(stamp, "time=")); err == nil {
			at, found = t, true
			if !last {
				break
			}
		}
	}
	return at, found
}
