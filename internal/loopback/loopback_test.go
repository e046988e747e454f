package loopback

import "testing"

func TestHost(t *testing.T) {
	for _, tc := range []struct {
		host string
		want bool
	}{
		{"127.0.0.1", true},
		{"127.1.2.3", true},
		{"::1", true},
		{"[::1]", true},
		{"0:0:0:0:0:0:0:1", true},
		{"::ffff:127.0.0.1", true}, // an IPv4-mapped loopback address
		{"localhost", true},
		{"LocalHost", true},
		{"", false},        // all interfaces
		{"0.0.0.0", false}, // all interfaces
		{"::", false},      // all interfaces
		{"10.0.0.1", false},
		{"192.0.2.1", false},
		{"fe80::1%eth0", false},
		{"localhost.localdomain", false}, // a name: not resolved
		{"ip6-localhost", false},
		{"nats.example.com", false},
		{"127.0.0.1.nip.io", false},
	} {
		if got := Host(tc.host); got != tc.want {
			t.Errorf("Host(%q) = %v, want %v", tc.host, got, tc.want)
		}
	}
}

func TestHostPort(t *testing.T) {
	for _, tc := range []struct {
		addr string
		want bool
	}{
		{"127.0.0.1:7946", true},
		{"[::1]:0", true},
		{"localhost:7946", true},
		{"0.0.0.0:7946", false},
		{"[::]:7946", false},
		{":7946", false},
		{"10.77.0.1:7946", false},
		{"127.0.0.1", false}, // no port: not an address
	} {
		if got := HostPort(tc.addr); got != tc.want {
			t.Errorf("HostPort(%q) = %v, want %v", tc.addr, got, tc.want)
		}
	}
}
