// Package freeport picks a port for a process that will bind it itself a
// moment later: a rank's memberlist port chosen by launch, rank 0's model
// runtime rendezvous (MASTER_PORT), a NATS server rank 0 hosts.
//
// Such a pick can only check that the port is free now. A port the kernel
// hands out on its own (a bind to port 0, or the source port of a connect)
// comes from its ephemeral range, and in a job many processes bind port 0
// at once: a pick from that range can be taken before its owner binds it.
// So Pick chooses below the ephemeral range, at random, where only an
// explicit bind can collide. Where the range leaves no room below it, Pick
// falls back to a port the kernel picks, and the race is back.
package freeport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// The range Pick chooses from is [Base, min(Top, the ephemeral range's
// first port)): above the ports most services are configured on, and
// below Kubernetes' NodePorts (30000–32767), which kube-proxy may redirect
// on a host whatever is bound there.
const (
	Base = 20000
	Top  = 30000
)

// tries bounds the random picks before Pick falls back to port 0.
const tries = 64

// rangeFile is where Linux keeps its ephemeral range ("low<TAB>high").
const rangeFile = "/proc/sys/net/ipv4/ip_local_port_range"

// defaultLow is the start of the IANA ephemeral range, the default of the
// BSDs and macOS, used where rangeFile cannot be read.
const defaultLow = 49152

// Pick returns a port free on host for TCP, and for UDP too when udp is
// set (memberlist binds both), none of avoid. host "" checks every
// interface, as a server listening on all of them will bind.
func Pick(host string, udp bool, avoid ...int) (int, error) {
	return pick(host, udp, min(Top, ephemeralLow(rangeFile)), avoid, free)
}

// PickN returns n distinct ports as Pick does.
func PickN(host string, udp bool, n int) ([]int, error) {
	var ports []int
	for range n {
		p, err := Pick(host, udp, ports...)
		if err != nil {
			return nil, err
		}
		ports = append(ports, p)
	}
	return ports, nil
}

// checkFunc binds port on host (TCP, and UDP if udp) and releases it.
type checkFunc func(host string, port int, udp bool) error

// pick chooses at random in [Base, top) with check, or falls back to a
// kernel-picked port when the range is too small, every random pick is
// taken, or check fails other than for a port in use (a host that
// cannot be bound fails the same for every port).
func pick(host string, udp bool, top int, avoid []int, check checkFunc) (int, error) {
	if top-Base >= tries {
		for range tries {
			p := Base + rand.IntN(top-Base)
			if slices.Contains(avoid, p) {
				continue
			}
			err := check(host, p, udp)
			if err == nil {
				return p, nil
			}
			if !errors.Is(err, syscall.EADDRINUSE) {
				return 0, fmt.Errorf("pick a free port on %q: %w", host, err)
			}
		}
	}
	return kernelPort(host, udp, avoid)
}

// free binds port on host (TCP, and UDP if udp) and releases it.
func free(host string, port int, udp bool) error {
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	defer l.Close()
	if !udp {
		return nil
	}
	u, err := net.ListenPacket("udp", addr)
	if err != nil {
		return err
	}
	return u.Close()
}

// kernelPort is a port the kernel picks, free for TCP (and UDP if udp),
// none of avoid.
func kernelPort(host string, udp bool, avoid []int) (int, error) {
	for range 20 {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return 0, fmt.Errorf("pick a free port on %q: %w", host, err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !slices.Contains(avoid, p) && (!udp || free(host, p, true) == nil) {
			return p, nil
		}
	}
	return 0, fmt.Errorf("pick a free port on %q: no port free for both TCP and UDP", host)
}

// ephemeralLow is the first port of the kernel's ephemeral range, read
// from path; defaultLow if it cannot be read or parsed.
func ephemeralLow(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return defaultLow
	}
	low, err := parseLow(string(b))
	if err != nil {
		return defaultLow
	}
	return low
}

// parseLow reads "low high" (any white space) and returns low.
func parseLow(s string) (int, error) {
	f := strings.Fields(s)
	if len(f) != 2 {
		return 0, errors.New("want two ports")
	}
	low, err := strconv.Atoi(f[0])
	if err != nil || low < 1 || low > 65535 {
		return 0, fmt.Errorf("bad low port %q", f[0])
	}
	return low, nil
}
