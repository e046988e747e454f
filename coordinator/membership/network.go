package membership

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// Network is an in-process network for tests of whole agents: transports
// that reach each other through channels, as memberlist's MockNetwork does,
// plus what failure tests need and MockNetwork cannot model. MockNetwork's
// channels are unbuffered and nobody reads a stopped member's, so a write to
// a member that is gone blocks its sender forever, and two members sending
// to each other at once block each other. Here a packet is queued without
// waiting and dropped when it cannot be (the member stopped, is cut off or
// its queue is full), as UDP drops it, and a dial to a member that is gone
// is refused; a member can be cut off (a crashed or frozen host) and a new
// transport can take a stopped one's address (a process restarted in place).
// It lives outside _test files so other packages' tests can use it.
type Network struct {
	mu    sync.Mutex
	live  map[string]*NetworkTransport // by address
	cut   map[string]bool
	ports int
}

// packetQueue is how many packets a member's queue holds, as a socket's
// receive buffer does.
const packetQueue = 1024

// NewNetwork returns an empty network.
func NewNetwork() *Network {
	return &Network{live: map[string]*NetworkTransport{}, cut: map[string]bool{}}
}

// ErrUnreachable is what a dial to an address with no live member returns.
var ErrUnreachable = errors.New("connection refused")

// Transport returns a new transport at addr (an IP and a port); "" picks
// 127.0.0.1 and a port of its own. A transport still live at addr is
// refused: stop it first (its member's Shutdown does).
func (n *Network) Transport(addr string) (*NetworkTransport, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if addr == "" {
		n.ports++
		addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(n.ports))
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || net.ParseIP(host) == nil {
		return nil, fmt.Errorf("network transport: %q is not ip:port", addr)
	}
	if _, err := strconv.Atoi(port); err != nil {
		return nil, fmt.Errorf("network transport: %q is not ip:port", addr)
	}
	if _, ok := n.live[addr]; ok {
		return nil, fmt.Errorf("network transport: %s is in use", addr)
	}
	t := &NetworkTransport{net: n, addr: addr, packets: make(chan *memberlist.Packet, packetQueue), streams: make(chan net.Conn), done: make(chan struct{})}
	n.live[addr] = t
	return t, nil
}

// Cut takes addr off the network (true) or puts it back (false): while it
// is cut, nothing it sends arrives and nothing reaches it.
func (n *Network) Cut(addr string, cut bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cut[addr] = cut
}

// route returns the live transport at to, or nil when from or to is cut
// off or nobody lives at to.
func (n *Network) route(from, to string) *NetworkTransport {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cut[from] || n.cut[to] {
		return nil
	}
	return n.live[to]
}

func (n *Network) remove(t *NetworkTransport) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.live[t.addr] == t {
		delete(n.live, t.addr)
	}
}

// NetworkTransport is one member's end of a Network; Config.Transport takes
// it.
type NetworkTransport struct {
	net     *Network
	addr    string
	packets chan *memberlist.Packet
	streams chan net.Conn
	done    chan struct{}
	once    sync.Once
}

var _ memberlist.Transport = (*NetworkTransport)(nil)

// Addr is the transport's address, which peers join.
func (t *NetworkTransport) Addr() string { return t.addr }

// FinalAdvertiseAddr implements memberlist.Transport.
func (t *NetworkTransport) FinalAdvertiseAddr(string, int) (net.IP, int, error) {
	host, port, _ := net.SplitHostPort(t.addr)
	p, _ := strconv.Atoi(port)
	return net.ParseIP(host), p, nil
}

// WriteTo implements memberlist.Transport. A packet that cannot be
// delivered is dropped, as UDP does.
func (t *NetworkTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	now := time.Now()
	dest := t.net.route(t.addr, addr)
	if dest == nil {
		return now, nil
	}
	p := &memberlist.Packet{Buf: append([]byte(nil), b...), From: netAddr(t.addr), Timestamp: now}
	// Never block, as a UDP send does not: a member whose packet loop is
	// busy sending (an ack to us, say) must not wait on ours. A full
	// queue drops the packet, as a full socket buffer would.
	select {
	case dest.packets <- p:
	default:
	}
	return now, nil
}

// PacketCh implements memberlist.Transport.
func (t *NetworkTransport) PacketCh() <-chan *memberlist.Packet { return t.packets }

// DialTimeout implements memberlist.Transport.
func (t *NetworkTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	dest := t.net.route(t.addr, addr)
	if dest == nil {
		return nil, fmt.Errorf("dial %s: %w", addr, ErrUnreachable)
	}
	local, remote := net.Pipe()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case dest.streams <- remote:
		return local, nil
	case <-dest.done:
	case <-t.done:
	case <-timer.C:
	}
	local.Close()
	remote.Close()
	return nil, fmt.Errorf("dial %s: %w", addr, ErrUnreachable)
}

// StreamCh implements memberlist.Transport.
func (t *NetworkTransport) StreamCh() <-chan net.Conn { return t.streams }

// Shutdown implements memberlist.Transport: the address is free again.
func (t *NetworkTransport) Shutdown() error {
	t.once.Do(func() {
		close(t.done)
		t.net.remove(t)
	})
	return nil
}

type netAddr string

func (a netAddr) Network() string { return "memory" }
func (a netAddr) String() string  { return string(a) }
