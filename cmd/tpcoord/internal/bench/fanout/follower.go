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

// FollowerOptions configure RunFollower, the hidden `tpcoord bench
// broadcast-follower`. Errors of Validate name its flags.
type FollowerOptions struct {
	Transport string        // --transport: nats or tcp
	Addr      string        // --addr: NATS URL or TCP host:port of the publisher
	Subject   string        // --subject: NATS subject
	Messages  int           // --messages: the publisher sends
	Deadline  time.Duration // --deadline: give up and report after this long
	// JobKeyFile (--job-key-file): verify every message's MAC under this
	// key before taking its receive time; one that does not verify is
	// not recorded but counted.
	JobKeyFile string
}

// Validate checks o; its errors name the flag.
func (o FollowerOptions) Validate() error {
	switch {
	case o.Transport != "nats" && o.Transport != "tcp":
		return fmt.Errorf("--transport: %q is not one of nats, tcp", o.Transport)
	case o.Addr == "":
		return errors.New("--addr: required")
	case o.Transport == "nats" && o.Subject == "":
		return errors.New("--subject: required with --transport nats")
	case o.Messages < 1:
		return fmt.Errorf("--messages: must be > 0, got %d", o.Messages)
	case o.Deadline <= 0:
		return fmt.Errorf("--deadline: must be > 0, got %v", o.Deadline)
	}
	return nil
}

// RunFollower is a follower process of bench broadcast: it receives the
// messages, prints "ready" once subscribed or connected, and, after the
// end marker, all messages or the deadline, one JSON line of latencies
// (followerReport).
func RunFollower(ctx context.Context, stdout io.Writer, o FollowerOptions) error {
	if err := o.Validate(); err != nil {
		return err
	}
	verify, err := macCodec(o.JobKeyFile)
	if err != nil {
		return err
	}
	rec := newRecorder(o.Messages)
	rec.verify = verify
	deadline := time.Now().Add(o.Deadline)
	var cpu0 time.Duration
	ready := func() error {
		cpu0 = selfCPU()
		_, err := fmt.Fprintln(stdout, "ready")
		return err
	}
	if o.Transport == "nats" {
		err = followNATS(ctx, o, rec, deadline, ready)
	} else {
		err = followTCP(o, rec, deadline, ready)
	}
	if err != nil {
		return err
	}
	lat, bad := rec.snapshot()
	return stats.WriteJSONLine(stdout, followerReport{LatNS: lat, CPUNS: int64(selfCPU() - cpu0), BadMAC: bad})
}

// followNATS subscribes as an agent does (natsbus: its options and
// pending limits).
func followNATS(ctx context.Context, o FollowerOptions, rec *recorder, deadline time.Time, ready func() error) error {
	nc, err := natsbus.Connect(natsbus.Config{URL: o.Addr, Name: "tpcoord-bench-follower"})
	if err != nil {
		return err
	}
	defer nc.Close()
	unsub, err := nc.Subscribe(o.Subject, func(m *broadcast.Msg) { rec.receive(m.Data) })
	if err != nil {
		return err
	}
	defer func() { _ = unsub() }()
	// The server has the subscription once the flush round-trip returns.
	if err := nc.Flush(ctx); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	if err := ready(); err != nil {
		return err
	}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case <-rec.done:
	case <-timer.C:
	}
	return nil
}

// followTCP reads length-prefixed messages from the publisher's
// connection until the end marker, EOF or the deadline.
func followTCP(o FollowerOptions, rec *recorder, deadline time.Time, ready func() error) error {
	cn, err := net.DialTimeout("tcp", o.Addr, 5*time.Second)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer cn.Close()
	if err := cn.SetReadDeadline(deadline); err != nil {
		return err
	}
	if err := ready(); err != nil {
		return err
	}
	br := bufio.NewReaderSize(cn, 64<<10)
	var hdr [4]byte
	var buf []byte
	for {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			// EOF or the deadline: report what arrived.
			return nil
		}
		n := binary.LittleEndian.Uint32(hdr[:])
		if n > maxPayload {
			return fmt.Errorf("frame of %d bytes exceeds %d", n, maxPayload)
		}
		if cap(buf) < int(n) {
			buf = make([]byte, n)
		}
		buf = buf[:n]
		if _, err := io.ReadFull(br, buf); err != nil {
			return nil
		}
		if rec.receive(buf) {
			if seq, _, _ := header(buf); seq == endSeq {
				return nil
			}
		}
	}
}
