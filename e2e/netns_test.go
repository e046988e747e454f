package e2e

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// Hosts for multi-node tests: network namespaces on one machine, each
// with one interface on a shared bridge, so that processes in different
// namespaces talk over a real (virtual) network, and a host can be taken
// off it (its link set down) the way a machine or its network dies.

// nsSubnet holds the hosts' addresses: nsSubnet.1, nsSubnet.2, …; they
// exist only inside the namespaces.
const nsSubnet = "10.77.0."

// host is one network namespace standing in for a machine.
type host struct {
	name string // "a", "b", …
	ns   string // the namespace
	addr string // its address on the bridge
	dev  string // its interface on the bridge
	conf string // its /etc/tpcoord (a temp directory), if the test gives it one
}

// cmd runs name in h's namespace; ip netns exec execs the command, so the
// process keeps the PID (signals and exit codes are the program's).
func (h *host) cmd(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", h.ns, name}, args...)...)
}

// setLink takes h off the network (down) or puts it back: nothing is sent
// or received while it is down, so its peers see it vanish, not close.
func (h *host) setLink(up bool) error {
	state := "down"
	if up {
		state = "up"
	}
	return ipRun("-n", h.ns, "link", "set", h.dev, state)
}

// ipRun runs ip(8) and returns its combined output as the error's text.
func ipRun(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// makeHosts makes one namespace per name, each with loopback up and a
// veth whose other end is a port of a bridge in a namespace of its own
// (the switch); host i gets nsSubnet.(i+1). Nothing is added to the
// test's own namespace. It skips the test where namespaces cannot be made.
func makeHosts(t *testing.T, names ...string) []*host {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("multi-node test needs root to create network namespaces")
	}
	if out, err := exec.Command("ip", "-V").CombinedOutput(); err != nil {
		t.Skipf("iproute2 is not usable (ip -V: %v: %s)", err, out)
	}
	id := os.Getpid() % 100000
	sw := fmt.Sprintf("tpc-e2e-%d-sw", id)
	if err := ipRun("netns", "add", sw); err != nil {
		t.Skipf("cannot create a network namespace: %v", err)
	}
	t.Cleanup(func() { delNetns(t, sw) })
	ipRunAll(t, []string{"-n", sw, "link", "add", "br0", "type", "bridge"}, []string{"-n", sw, "link", "set", "br0", "up"})
	hosts := make([]*host, len(names))
	for i, name := range names {
		// Interface names: at most 15 bytes, unique while they are made.
		h := &host{name: name, ns: fmt.Sprintf("tpc-e2e-%d-%s", id, name), addr: fmt.Sprintf("%s%d", nsSubnet, i+1), dev: fmt.Sprintf("tpv%d%s", id, name)}
		if err := ipRun("netns", "add", h.ns); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { delNetns(t, h.ns) })
		port := h.dev + "p"
		ipRunAll(t,
			[]string{"link", "add", h.dev, "netns", h.ns, "type", "veth", "peer", "name", port, "netns", sw},
			[]string{"-n", sw, "link", "set", port, "master", "br0"},
			[]string{"-n", sw, "link", "set", port, "up"},
			[]string{"-n", h.ns, "link", "set", "lo", "up"},
			[]string{"-n", h.ns, "addr", "add", h.addr + "/24", "dev", h.dev},
			[]string{"-n", h.ns, "link", "set", h.dev, "up"})
		hosts[i] = h
	}
	return hosts
}

func ipRunAll(t *testing.T, cmds ...[]string) {
	t.Helper()
	for _, args := range cmds {
		if err := ipRun(args...); err != nil {
			t.Fatal(err)
		}
	}
}

func delNetns(t *testing.T, ns string) {
	if err := ipRun("netns", "del", ns); err != nil {
		t.Log(err)
	}
}

// proc is a process started in a namespace.
type proc struct {
	name   string
	cmd    *exec.Cmd
	log    *syncBuffer
	exited chan struct{}
	err    error // valid after exited is closed
}

// startIn starts prog in h with env. The process is killed, if still
// running, and its output shown if the test failed, when the test ends
// (before the namespaces are deleted: cleanups run last-registered first).
func startIn(t *testing.T, h *host, name string, env []string, prog string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, log: &syncBuffer{}, exited: make(chan struct{})}
	p.cmd = h.cmd(prog, args...)
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("%s output:\n%s", name, p.log.String())
		}
	})
	return p
}

// kill SIGKILLs p, if it still runs, and waits for it.
func (p *proc) kill() {
	select {
	case <-p.exited:
	default:
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.exited
	}
}

// alive reports whether p has not exited.
func (p *proc) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// tcpPeers returns the remote addresses of pid's established TCP
// connections to port, as the kernel's socket table of h's namespace has
// them (ss -p): what a process is connected to, without its cooperation.
func tcpPeers(h *host, pid, port int) ([]string, error) {
	out, err := h.cmd("ss", "-Htnp", "state", "established", fmt.Sprintf("( dport = :%d )", port)).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("ss in %s: %w: %s", h.ns, err, out)
	}
	var peers []string
	for _, line := range strings.Split(string(out), "\n") {
		if !strings.Contains(line, fmt.Sprintf("pid=%d,", pid)) {
			continue
		}
		for _, f := range strings.Fields(line) {
			if ip, p, err := net.SplitHostPort(f); err == nil && p == fmt.Sprint(port) {
				peers = append(peers, ip)
			}
		}
	}
	return peers, nil
}
