package membership

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"time"

	sockaddr "github.com/hashicorp/go-sockaddr"
	"github.com/hashicorp/memberlist"
)

// maxPacket is the largest UDP datagram a member can receive.
const maxPacket = 65536

// udpRecvBuffer is the receive buffer asked of the kernel for the UDP
// socket (it may grant less): gossip arrives in bursts while a world forms.
const udpRecvBuffer = 2 << 20

// sockets is a member's network: a TCP listener for memberlist's streams
// (joins, state exchanges) and a UDP socket for its packets (gossip,
// probes), on one host:port, as memberlist's own NetTransport. Unlike
// NetTransport, which reads every packet into a new 64 KiB buffer (to the
// garbage collector, and a 64 KiB clear and fresh pages for each), it
// reads into one buffer and hands memberlist a copy of the packet's size:
// in a job of 64 ranks on 2 cores those buffers were a tenth of the start's
// page faults.
type sockets struct {
	tcp     *net.TCPListener
	udp     *net.UDPConn
	packets chan *memberlist.Packet
	streams chan net.Conn
	log     *slog.Logger

	done     chan struct{} // closed by Shutdown
	shutOnce sync.Once
	wg       sync.WaitGroup // the accept and read loops
}

var _ memberlist.NodeAwareTransport = (*sockets)(nil)

// bindTries is how often newSockets tries a free port (port 0): the port
// the TCP listener got may be taken for UDP.
const bindTries = 10

// newSockets binds TCP and UDP at host:port (port 0: a free port, the
// same for both) and starts reading them.
func newSockets(host string, port int, log *slog.Logger) (*sockets, error) {
	tries := 1
	if port == 0 {
		tries = bindTries
	}
	var err error
	for range tries {
		var s *sockets
		if s, err = bindSockets(host, port, log); err == nil {
			s.wg.Add(2)
			go s.accept()
			go s.readPackets()
			return s, nil
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			break
		}
	}
	return nil, err
}

func bindSockets(host string, port int, log *slog.Logger) (*sockets, error) {
	ip := net.ParseIP(host)
	if ip == nil {
		return nil, fmt.Errorf("bind address %q is not an IP address", host)
	}
	tcp, err := net.ListenTCP("tcp", &net.TCPAddr{IP: ip, Port: port})
	if err != nil {
		return nil, fmt.Errorf("TCP listener on %s: %w", net.JoinHostPort(host, fmt.Sprint(port)), err)
	}
	port = tcp.Addr().(*net.TCPAddr).Port
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: ip, Port: port})
	if err != nil {
		tcp.Close()
		return nil, fmt.Errorf("UDP socket on %s: %w", net.JoinHostPort(host, fmt.Sprint(port)), err)
	}
	setReadBuffer(udp)
	return &sockets{tcp: tcp, udp: udp, log: log, done: make(chan struct{}),
		packets: make(chan *memberlist.Packet), streams: make(chan net.Conn)}, nil
}

// setReadBuffer asks for udpRecvBuffer, halving the request until the
// kernel takes it.
func setReadBuffer(c *net.UDPConn) {
	for size := udpRecvBuffer; size >= 64<<10; size /= 2 {
		if c.SetReadBuffer(size) == nil {
			return
		}
	}
}

// port is where the sockets listen.
func (s *sockets) port() int { return s.tcp.Addr().(*net.TCPAddr).Port }

// FinalAdvertiseAddr implements memberlist.Transport: ip and port if ip is
// given (port 0: the bound one), else the bound address, or the host's
// private IP where bound to every interface.
func (s *sockets) FinalAdvertiseAddr(ip string, port int) (net.IP, int, error) {
	if port == 0 || ip == "" {
		port = s.port()
	}
	if ip != "" {
		a := net.ParseIP(ip)
		if a == nil {
			return nil, 0, fmt.Errorf("advertise address %q is not an IP address", ip)
		}
		if a4 := a.To4(); a4 != nil {
			a = a4
		}
		return a, port, nil
	}
	bound := s.tcp.Addr().(*net.TCPAddr).IP
	if !bound.IsUnspecified() {
		return bound, port, nil
	}
	private, err := sockaddr.GetPrivateIP()
	if err != nil {
		return nil, 0, fmt.Errorf("bound to every interface, and no private IP to advertise: %w", err)
	}
	if private == "" {
		return nil, 0, errors.New("bound to every interface, and no private IP to advertise: give an address to bind")
	}
	return net.ParseIP(private), port, nil
}

// WriteTo implements memberlist.Transport.
func (s *sockets) WriteTo(b []byte, addr string) (time.Time, error) {
	to, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return time.Time{}, err
	}
	_, err = s.udp.WriteTo(b, to)
	return time.Now(), err
}

// WriteToAddress implements memberlist.NodeAwareTransport.
func (s *sockets) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	return s.WriteTo(b, a.Addr)
}

// PacketCh implements memberlist.Transport.
func (s *sockets) PacketCh() <-chan *memberlist.Packet { return s.packets }

// DialTimeout implements memberlist.Transport.
func (s *sockets) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	return d.Dial("tcp", addr)
}

// DialAddressTimeout implements memberlist.NodeAwareTransport.
func (s *sockets) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	return s.DialTimeout(a.Addr, timeout)
}

// StreamCh implements memberlist.Transport.
func (s *sockets) StreamCh() <-chan net.Conn { return s.streams }

// Shutdown implements memberlist.Transport: it closes the sockets and
// waits for the loops. A second call does nothing.
func (s *sockets) Shutdown() error {
	s.shutOnce.Do(func() {
		close(s.done)
		s.tcp.Close()
		s.udp.Close()
	})
	s.wg.Wait()
	return nil
}

func (s *sockets) closed() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// retry logs a loop's error and waits before the loop goes on, backing
// off from 5 ms to 1 s (out of file descriptors, say); it reports false
// once the sockets are shut, and the loop ends.
func (s *sockets) retry(delay *time.Duration, what string, err error) bool {
	if s.closed() {
		return false
	}
	*delay = min(max(2**delay, 5*time.Millisecond), time.Second)
	s.log.Error(what, "err", err, "retry_in", *delay)
	return s.pause(*delay)
}

// pause waits d, or until Shutdown; it reports whether the loop goes on.
func (s *sockets) pause(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.done:
		return false
	}
}

// accept hands memberlist each connection.
func (s *sockets) accept() {
	defer s.wg.Done()
	delay := time.Duration(0)
	for {
		conn, err := s.tcp.Accept()
		if err != nil {
			if !s.retry(&delay, "accepting a memberlist connection", err) {
				return
			}
			continue
		}
		delay = 0
		select {
		case s.streams <- conn:
		case <-s.done:
			conn.Close()
			return
		}
	}
}

// readPackets hands memberlist each packet, as a copy of its size.
func (s *sockets) readPackets() {
	defer s.wg.Done()
	buf := make([]byte, maxPacket)
	delay := time.Duration(0)
	for {
		n, from, err := s.udp.ReadFrom(buf)
		now := time.Now()
		if err != nil {
			if !s.retry(&delay, "reading a memberlist packet", err) {
				return
			}
			continue
		}
		delay = 0
		if n < 1 {
			continue
		}
		select {
		case s.packets <- &memberlist.Packet{Buf: bytes.Clone(buf[:n]), From: from, Timestamp: now}:
		case <-s.done:
			return
		}
	}
}
