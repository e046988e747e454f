// Package loopback decides whether an address stays on this machine: the
// one rule behind every "not on loopback without a key or credentials"
// refusal, judged from the text alone (no DNS lookup at validation time,
// whose answer could change before the address is used).
package loopback

import (
	"net"
	"strings"
)

// Host reports whether host names this machine's loopback: an IP literal
// in 127.0.0.0/8 or ::1 (net.IP.IsLoopback), or the name "localhost" (any
// case). Every other name counts as reaching the network, however it
// resolves; so do "", 0.0.0.0 and :: (all interfaces) and an IPv6
// literal with a zone.
func Host(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
	return ip != nil && ip.IsLoopback()
}

// HostPort is Host for the host of a host:port address; an address that
// does not split counts as reaching the network.
func HostPort(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	return err == nil && Host(host)
}
