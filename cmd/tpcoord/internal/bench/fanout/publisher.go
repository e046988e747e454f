package fanout

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/broadcast/natsbus"
	"github.com/tpcoord/tpcoord/cmd/tpcoord/internal/bench/stats"
)

// PublisherOptions configure RunPublisher, the hidden `tpcoord bench
// broadcast-publisher`. Errors of Validate name its flags.
type PublisherOptions struct {
	Transport string        // --transport: nats or tcp
	Followers int           // --followers: tcp: connections to accept
	Payload   int           // --payload: message size in bytes
	Interval  time.Duration // --interval: between two messages
	Messages  int           // --messages: to publish
	Subject   string        // --subject: NATS subject
	NATSURL   string        // --nats: NATS server URL (empty: embed one)
	// JobKeyFile (--job-key-file): seal every message with a MAC under
	// this key.
	JobKeyFile string
}

// Validate checks o; its errors name the flag.
func (o PublisherOptions) Validate() error {
	switch {
	case o.Transport != "nats" && o.Transport != "tcp":
		return fmt.Errorf("--transport: %q is not one of nats, tcp", o.Transport)
	case o.Transport == "tcp" && (o.Followers < 1 || o.Followers > maxFollowers):
		return fmt.Errorf("--followers: %d is outside 1..%d", o.Followers, maxFollowers)
	case o.Transport == "nats" && o.Subject == "":
		return errors.New("--subject: required with --transport nats")
	case o.Payload < minPayload || o.Payload > maxPayload:
		return fmt.Errorf("--payload: %d is outside %d..%d bytes", o.Payload, minPayload, maxPayload)
	case o.JobKeyFile != "" && o.Payload < minPayload+broadcast.MACSize:
		return fmt.Errorf("--payload: %d bytes leave no room for the MAC (at least %d)", o.Payload, minPayload+broadcast.MACSize)
	case o.Interval <= 0:
		return fmt.Errorf("--interval: must be > 0, got %v", o.Interval)
	case o.Messages < 1:
		return fmt.Errorf("--messages: must be > 0, got %d", o.Messages)
	}
	return nil
}

// RunPublisher is the publisher process of bench broadcast. It prints
// "addr ADDR" (a TCP host:port, or the NATS URL followers connect to),
// waits for "go" on stdin, publishes, prints one JSON report line, and
// returns when stdin ends (an embedded NATS server must outlive the
// followers' reception).
func RunPublisher(ctx context.Context, stdin io.Reader, stdout io.Writer, o PublisherOptions) error {
	if err := o.Validate(); err != nil {
		return err
	}
	seal, err := macCodec(o.JobKeyFile)
	if err != nil {
		return err
	}
	pc, err := newPacer()
	if err != nil {
		return err
	}
	defer pc.Close()
	var tr publishTransport
	if o.Transport == "tcp" {
		tr, err = listenTCP(o.Followers, o.Payload)
	} else {
		tr, err = connectNATS(o.NATSURL, o.Subject)
	}
	if err != nil {
		return err
	}
	defer tr.Close()
	if _, err := fmt.Fprintf(stdout, "addr %s\n", tr.addr()); err != nil {
		return err
	}
	in := bufio.NewReader(stdin)
	line, err := in.ReadString('\n')
	if err != nil {
		return fmt.Errorf("waiting for \"go\" on stdin: got %q: %w", line, err)
	}
	if line != "go\n" {
		return fmt.Errorf("waiting for \"go\" on stdin: got %q", line)
	}
	if err := tr.accept(); err != nil {
		return err
	}
	cpu0 := selfCPU()
	sent, err := publish(ctx, pc, o, seal, tr.send)
	if err == nil {
		err = tr.flush(ctx)
	}
	if err != nil {
		return err
	}
	if err := stats.WriteJSONLine(stdout, publisherReport{SentIntervalUS: sent, CPUNS: int64(selfCPU() - cpu0)}); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, in) // until stdin ends: the followers have everything
	return nil
}

// publish sends the messages on a fixed schedule and then the end marker,
// each sealed by seal if it is not nil (after its send time is taken: the
// MAC's cost is in the latency). It returns the achieved mean interval in
// µs.
func publish(ctx context.Context, pc *pacer, o PublisherOptions, seal *broadcast.Codec, send func([]byte) error) (float64, error) {
	msg := make([]byte, o.Payload)
	start := time.Now()
	next := start
	for seq := range o.Messages {
		for d := time.Until(next); d > 0; d = time.Until(next) {
			if err := ctx.Err(); err != nil {
				return 0, err
			}
			if err := pc.sleep(min(d, 100*time.Millisecond)); err != nil {
				return 0, err
			}
		}
		putHeader(msg, uint64(seq), time.Now().UnixNano())
		if seal != nil {
			seal.SealMAC(msg)
		}
		if err := send(msg); err != nil {
			return 0, err
		}
		next = next.Add(o.Interval)
		// After a stall (a descheduled publisher) drop the debt instead of
		// sending a burst, which would measure queueing, not fan-out.
		if now := time.Now(); now.Sub(next) > o.Interval {
			next = now.Add(o.Interval)
		}
	}
	sent := stats.US(time.Since(start).Nanoseconds()) / float64(o.Messages)
	putHeader(msg, endSeq, time.Now().UnixNano())
	if seal != nil {
		seal.SealMAC(msg)
	}
	return sent, send(msg)
}

// publishTransport is the publisher's side of one transport.
type publishTransport interface {
	addr() string                    // what followers connect to
	accept() error                   // after "go": take the followers' connections
	send(msg []byte) error           // one message to every follower
	flush(ctx context.Context) error // after the last message
	Close() error
}

// tcpFanout writes each length-prefixed message to every follower's
// connection in turn.
type tcpFanout struct {
	ln        *net.TCPListener
	followers int
	conns     []net.Conn
	frame     []byte // length prefix and message
}

func listenTCP(followers, payload int) (*tcpFanout, error) {
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, err
	}
	t := &tcpFanout{ln: ln, followers: followers, frame: make([]byte, 4+payload)}
	binary.LittleEndian.PutUint32(t.frame, uint32(payload))
	return t, nil
}

func (t *tcpFanout) addr() string { return t.ln.Addr().String() }

// accept takes every follower's connection: each printed "ready" after
// connecting, so all of them are in the accept backlog.
func (t *tcpFanout) accept() error {
	_ = t.ln.SetDeadline(time.Now().Add(10 * time.Second))
	for range t.followers {
		cn, err := t.ln.Accept()
		if err != nil {
			return fmt.Errorf("accept follower: %w", err)
		}
		t.conns = append(t.conns, cn)
	}
	return nil
}

func (t *tcpFanout) send(msg []byte) error {
	copy(t.frame[4:], msg)
	for _, cn := range t.conns {
		if _, err := cn.Write(t.frame); err != nil {
			return fmt.Errorf("write to follower: %w", err)
		}
	}
	return nil
}

func (t *tcpFanout) flush(context.Context) error { return nil }

func (t *tcpFanout) Close() error {
	for _, cn := range t.conns {
		cn.Close()
	}
	return t.ln.Close()
}

// natsPublisher publishes as rank 0 does under launch: with an embedded
// server (unless given one) reached in-process, every publish written
// through.
type natsPublisher struct {
	srv     *natsbus.Server // nil with a given server
	nc      *natsbus.Conn
	url     string
	subject string
}

func connectNATS(url, subject string) (*natsPublisher, error) {
	p := &natsPublisher{url: url, subject: subject}
	cfg := natsbus.Config{URL: url, Name: "tpcoord-bench-publisher", WriteThrough: true}
	if url == "" {
		srv, err := natsbus.ServeLoopback()
		if err != nil {
			return nil, err
		}
		p.srv, p.url = srv, srv.URL()
		cfg.URL, cfg.InProcess = srv.URL(), srv
	}
	nc, err := natsbus.Connect(cfg)
	if err != nil {
		p.Close()
		return nil, err
	}
	p.nc = nc
	return p, nil
}

func (p *natsPublisher) addr() string  { return p.url }
func (p *natsPublisher) accept() error { return nil }

func (p *natsPublisher) send(msg []byte) error {
	return p.nc.Publish(&broadcast.Msg{Subject: p.subject, Data: msg})
}

func (p *natsPublisher) flush(ctx context.Context) error {
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := p.nc.Flush(fctx); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	return nil
}

func (p *natsPublisher) Close() error {
	if p.nc != nil {
		p.nc.Close()
	}
	if p.srv != nil {
		p.srv.Close()
	}
	return nil
}
