// Package freeport picks a port for a process that will bind it itself a
// moment later: a rank's memberlist port chosen by launch, rank 0's model
// runtime rendezvous (MASTER_PORT), a NATS server rank 0 hosts.
//
// Such a pick can only check that the port is free now. A port the kernel
// hands out on its own (a bind to port 0, or the source port of a connect)
// comes from its ephemeral range, and in a job many processes bind port 0
// at once: a pick from that range can be taken before its owner binds it.
// So Pick chooses below the ephemeral range, at random, where only an
// explicit bind can collide.
package freeport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// Base is the lowest port Pick chooses: above the registered ports most
// services are configured on.
const Base = 20000

// tries bounds the random picks before Pick falls back to port 0.
const tries = 64

// rangeFile is where Linux keeps its ephemeral range ("low<TAB>high").
const rangeFile = "/proc/sys/net/ipv4/ip_local_port_range"

// defaultLow is the start of the IANA ephemeral range, the default of the
// BSDs and macOS, used where rangeFile cannot be read.
const defaultLow = 49152

// Pick returns a port free on host for TCP, and for UDP too when udp is
// set (memberlist binds both). It picks at random in [Base, low), low
// being the start of the ephemeral range; when that range leaves no room
// below it, or no random pick is free, it takes a port from the kernel
// (port 0) as the last resort.
func Pick(host string, udp bool) (int, error) {
	return pick(host, udp, ephemeralLow(rangeFile))
}

func pick(host string, udp bool, low int) (int, error) {
	if low-Base >= tries {
		for range tries {
			p := Base + rand.IntN(low-Base)
			if free(host, p, udp) {
				return p, nil
			}
		}
	}
	return kernelPort(host, udp)
}

// free reports whether port can be bound on host now (TCP, and UDP if
// udp is set); it binds and releases it.
func free(host string, port int, udp bool) bool {
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	defer l.Close()
	if !udp {
		return true
	}
	u, err := net.ListenPacket("udp", addr)
	if err != nil {
		return false
	}
	u.Close()
	return true
}

// kernelPort is a port the kernel picks, free for TCP (and UDP if udp).
func kernelPort(host string, udp bool) (int, error) {
	for range 20 {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return 0, fmt.Errorf("pick a free port on %q: %w", host, err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !udp || free(host, p, true) {
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
