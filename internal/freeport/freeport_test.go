package freeport

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

const host = "127.0.0.1"

func TestPickIsBelowTheEphemeralRange(t *testing.T) {
	low := ephemeralLow(rangeFile)
	if low-Base < tries {
		t.Skipf("the ephemeral range starts at %d: no room below it", low)
	}
	for range 20 {
		p, err := Pick(host, true)
		if err != nil {
			t.Fatal(err)
		}
		if p < Base || p >= low {
			t.Fatalf("port %d, want one in [%d, %d)", p, Base, low)
		}
		mustBind(t, p, true) // it is free for both TCP and UDP
	}
}

// occupy binds every port in [Base, Base+tries) it can, for TCP or UDP;
// a port it cannot bind is taken by someone else, which is as good.
func occupy(t *testing.T, network string) {
	for p := Base; p < Base+tries; p++ {
		addr := net.JoinHostPort(host, strconv.Itoa(p))
		if network == "tcp" {
			if l, err := net.Listen("tcp", addr); err == nil {
				t.Cleanup(func() { l.Close() })
			}
			continue
		}
		if u, err := net.ListenPacket("udp", addr); err == nil {
			t.Cleanup(func() { u.Close() })
		}
	}
}

func TestPickSkipsTakenPorts(t *testing.T) {
	occupy(t, "tcp")
	p, err := pick(host, false, Base+tries)
	if err != nil {
		t.Fatal(err)
	}
	if p >= Base && p < Base+tries {
		t.Fatalf("port %d is taken, and every port of the range was", p)
	}
	mustBind(t, p, false)
}

func TestPickWantsUDPToo(t *testing.T) {
	occupy(t, "udp")
	p, err := pick(host, false, Base+tries)
	if err != nil {
		t.Fatal(err)
	}
	if p < Base || p >= Base+tries {
		t.Fatalf("TCP only: port %d, want one in [%d, %d) (TCP is free there)", p, Base, Base+tries)
	}
	p, err = pick(host, true, Base+tries)
	if err != nil {
		t.Fatal(err)
	}
	if p >= Base && p < Base+tries {
		t.Fatalf("TCP and UDP: port %d has its UDP twin taken", p)
	}
	mustBind(t, p, true)
}

func TestPickWithNoRoomTakesAKernelPort(t *testing.T) {
	p, err := pick(host, true, Base+tries-1)
	if err != nil {
		t.Fatal(err)
	}
	mustBind(t, p, true)
}

func TestPickBadHost(t *testing.T) {
	if _, err := pick("256.0.0.1", false, Base+1000); err == nil {
		t.Fatal("no error for a host that cannot be bound")
	}
}

func TestEphemeralLow(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		text string
		want int
	}{
		{"32768\t60999\n", 32768},
		{"1024 65535", 1024},
		{"", defaultLow},
		{"32768", defaultLow},
		{"x 60999", defaultLow},
		{"0 60999", defaultLow},
		{"70000 80000", defaultLow},
	} {
		path := filepath.Join(dir, "range")
		if err := os.WriteFile(path, []byte(tc.text), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := ephemeralLow(path); got != tc.want {
			t.Errorf("%q: low %d, want %d", tc.text, got, tc.want)
		}
	}
	if got := ephemeralLow(filepath.Join(dir, "missing")); got != defaultLow {
		t.Errorf("missing file: low %d, want %d", got, defaultLow)
	}
}

func mustBind(t *testing.T, p int, udp bool) {
	t.Helper()
	addr := net.JoinHostPort(host, strconv.Itoa(p))
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("port %d is not free for TCP: %v", p, err)
	}
	l.Close()
	if udp {
		u, err := net.ListenPacket("udp", addr)
		if err != nil {
			t.Fatalf("port %d is not free for UDP: %v", p, err)
		}
		u.Close()
	}
}
