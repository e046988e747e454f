package freeport

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

const host = "127.0.0.1"

func TestPickIsBelowTheEphemeralRange(t *testing.T) {
	top := min(Top, ephemeralLow(rangeFile))
	if top-Base < tries {
		t.Skipf("the ephemeral range starts at %d: no room below it", top)
	}
	for range 20 {
		p, err := Pick(host, true)
		if err != nil {
			t.Fatal(err)
		}
		if p < Base || p >= top {
			t.Fatalf("port %d, want one in [%d, %d)", p, Base, top)
		}
		mustBind(t, p, true) // it is free for both TCP and UDP
	}
}

// fakeCheck counts its calls and reports a port in use where inUse says.
type fakeCheck struct {
	calls int
	inUse func(port int) bool
	err   error // returned for every port if set
}

func (f *fakeCheck) check(_ string, port int, _ bool) error {
	f.calls++
	if f.err != nil {
		return f.err
	}
	if f.inUse(port) {
		return syscall.EADDRINUSE
	}
	return nil
}

// The tests below draw at random: a port from the free half of a range
// of 64 is found unless all 64 draws land in the other half, which
// happens with probability 2^-64.

func TestPickSkipsTakenPorts(t *testing.T) {
	f := &fakeCheck{inUse: func(p int) bool { return p < Base+tries/2 }}
	p, err := pick(host, false, Base+tries, nil, f.check)
	if err != nil {
		t.Fatal(err)
	}
	if p < Base+tries/2 || p >= Base+tries {
		t.Fatalf("port %d, want a free one in [%d, %d)", p, Base+tries/2, Base+tries)
	}
}

func TestPickAvoids(t *testing.T) {
	var avoid []int
	for p := Base; p < Base+tries/2; p++ {
		avoid = append(avoid, p)
	}
	f := &fakeCheck{inUse: func(int) bool { return false }}
	p, err := pick(host, false, Base+tries, avoid, f.check)
	if err != nil {
		t.Fatal(err)
	}
	if p < Base+tries/2 || p >= Base+tries {
		t.Fatalf("port %d, want one in [%d, %d), outside avoid", p, Base+tries/2, Base+tries)
	}
}

func TestPickFallsBackToAKernelPort(t *testing.T) {
	for _, tc := range []struct {
		name      string
		top       int
		wantCalls int
	}{
		{"every pick taken", Base + tries, tries},
		{"no room below the ephemeral range", Base + tries - 1, 0},
	} {
		f := &fakeCheck{inUse: func(int) bool { return true }}
		p, err := pick(host, true, tc.top, nil, f.check)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if f.calls != tc.wantCalls {
			t.Errorf("%s: %d random picks checked, want %d", tc.name, f.calls, tc.wantCalls)
		}
		// A kernel-picked port is in the ephemeral range, above this one
		// where the ephemeral range starts above it.
		if low := ephemeralLow(rangeFile); low >= tc.top && p < low {
			t.Errorf("%s: port %d is below the ephemeral range (from %d), want a kernel-picked one", tc.name, p, low)
		}
		mustBind(t, p, true)
	}
}

func TestPickStopsOnOtherErrors(t *testing.T) {
	f := &fakeCheck{err: syscall.EADDRNOTAVAIL}
	if _, err := pick(host, false, Base+1000, nil, f.check); err == nil || f.calls != 1 {
		t.Fatalf("error %v after %d checks, want an error after 1", err, f.calls)
	}
	// For real: an address of no interface here (TEST-NET-1, RFC 5737).
	if _, err := Pick("192.0.2.1", false); err == nil {
		t.Fatal("no error for a host that cannot be bound")
	}
}

func TestPickN(t *testing.T) {
	ports, err := PickN(host, false, 5)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if seen[p] {
			t.Fatalf("port %d picked twice: %v", p, ports)
		}
		seen[p] = true
		mustBind(t, p, false)
	}
	if len(ports) != 5 {
		t.Fatalf("%d ports, want 5", len(ports))
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
