package membership

import (
	"bytes"
	"io"
	"log/slog"
	"net"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/tpcoord/tpcoord/internal/poll"
)

func testSockets(t *testing.T) *sockets {
	t.Helper()
	s, err := newSockets("127.0.0.1", 0, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown() })
	return s
}

func (s *sockets) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port())) }

func nextPacket(t *testing.T, s *sockets) *memberlist.Packet {
	t.Helper()
	select {
	case p := <-s.PacketCh():
		return p
	case <-time.After(30 * time.Second):
		t.Fatal("no packet within 30 s")
		return nil
	}
}

// TestSocketsPacketsAreCopies: each packet memberlist gets is its own
// slice of its own size, though the sockets read every packet into one
// buffer (the second packet overwrites it before the first is looked at).
func TestSocketsPacketsAreCopies(t *testing.T) {
	a, b := testSockets(t), testSockets(t)
	first, second := bytes.Repeat([]byte("gossip "), 100), []byte("probe")
	for _, p := range [][]byte{first, second} {
		if _, err := a.WriteTo(p, b.addr()); err != nil {
			t.Fatal(err)
		}
	}
	p1 := nextPacket(t, b)
	p2 := nextPacket(t, b) // read into the buffer after p1 was handed over
	if !bytes.Equal(p1.Buf, first) || !bytes.Equal(p2.Buf, second) {
		t.Fatalf("packets %q, %q; want %q, %q", p1.Buf, p2.Buf, first, second)
	}
	if cap(p2.Buf) > 64 {
		t.Errorf("a %d-byte packet holds %d bytes (the read buffer?)", len(second), cap(p2.Buf))
	}
	if p1.From.String() != a.addr() || p1.Timestamp.IsZero() {
		t.Errorf("from %v at %v, want %s and a time", p1.From, p1.Timestamp, a.addr())
	}
}

func TestSocketsStreams(t *testing.T) {
	a, b := testSockets(t), testSockets(t)
	c, err := a.DialAddressTimeout(memberlist.Address{Addr: b.addr()}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var in net.Conn
	select {
	case in = <-b.StreamCh():
	case <-time.After(30 * time.Second):
		t.Fatal("no connection within 30 s")
	}
	defer in.Close()
	if _, err := c.Write([]byte("push-pull")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len("push-pull"))
	if _, err := io.ReadFull(in, got); err != nil || string(got) != "push-pull" {
		t.Fatalf("read %q, %v", got, err)
	}
}

func TestSocketsAdvertise(t *testing.T) {
	s := testSockets(t)
	for _, tc := range []struct {
		ip       string
		port     int
		wantIP   string
		wantPort int
	}{
		{"", 0, "127.0.0.1", s.port()},
		{"", 7000, "127.0.0.1", s.port()}, // the bound port, as NetTransport
		{"10.1.2.3", 0, "10.1.2.3", s.port()},
		{"10.1.2.3", 7000, "10.1.2.3", 7000},
	} {
		ip, port, err := s.FinalAdvertiseAddr(tc.ip, tc.port)
		if err != nil || ip.String() != tc.wantIP || port != tc.wantPort {
			t.Errorf("FinalAdvertiseAddr(%q, %d) = %v, %d, %v; want %s, %d", tc.ip, tc.port, ip, port, err, tc.wantIP, tc.wantPort)
		}
	}
	if _, _, err := s.FinalAdvertiseAddr("rank0.example", 1); err == nil || !strings.Contains(err.Error(), "not an IP address") {
		t.Errorf("a name to advertise: %v", err)
	}
}

func TestSocketsBindErrors(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	if _, err := newSockets("localhost", 0, log); err == nil || !strings.Contains(err.Error(), "not an IP address") {
		t.Errorf("a name to bind: %v", err)
	}
	s := testSockets(t)
	if _, err := newSockets("127.0.0.1", s.port(), log); err == nil || !strings.Contains(err.Error(), "TCP listener on 127.0.0.1:"+strconv.Itoa(s.port())) {
		t.Errorf("a port in use: %v", err)
	}
}

// TestSocketsShutdownWithHandOffsWaiting: Shutdown returns while both
// loops hold something memberlist has not taken (a packet, a connection),
// and a second call returns too.
func TestSocketsShutdownWithHandOffsWaiting(t *testing.T) {
	a, b := testSockets(t), testSockets(t)
	if _, err := a.WriteTo([]byte("ping"), b.addr()); err != nil {
		t.Fatal(err)
	}
	c, err := a.DialTimeout(b.addr(), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitHandOff(t, "(*sockets).readPackets")
	waitHandOff(t, "(*sockets).accept")
	done := make(chan struct{})
	go func() {
		_ = b.Shutdown()
		_ = b.Shutdown()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Shutdown did not return within 30 s")
	}
	if _, err := b.WriteTo([]byte("x"), a.addr()); err == nil {
		t.Error("wrote on a shut socket")
	}
}

// waitHandOff waits until a goroutine running loop (a sockets method) is
// blocked handing memberlist a packet or connection (in its select, or a
// bare channel send).
func waitHandOff(t *testing.T, loop string) {
	t.Helper()
	buf := make([]byte, 1<<20)
	poll.Until(t, 30*time.Second, loop+" never held a hand-off", func() bool {
		n := runtime.Stack(buf, true)
		for _, g := range strings.Split(string(buf[:n]), "\n\n") {
			head, _, _ := strings.Cut(g, "\n")
			if strings.Contains(g, loop) && (strings.Contains(head, "[select") || strings.Contains(head, "[chan send")) {
				return true
			}
		}
		return false
	})
}
