package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
)

// Wire format of one benchmark message, shared by both transports: the
// sequence number and the publisher's wall-clock send time
// (time.Now().UnixNano(), comparable across processes on one machine),
// little-endian, then zero padding up to --payload bytes. Over TCP each
// message is preceded by its length as a little-endian uint32.
const (
	bcHeaderLen  = 16
	bcMinPayload = bcHeaderLen
	bcMaxPayload = 1 << 20
	bcMaxFollow  = 64
	bcMinMsgs    = 10
	// bcEndSeq marks the message that tells a follower the run is over.
	bcEndSeq = math.MaxUint64

	// benchFollowerEnv is set in every follower's environment. The tpcoord
	// binary ignores it; a test binary (os.Executable() under go test) uses
	// it to act as the follower instead of running tests, see
	// bench_broadcast_test.go.
	benchFollowerEnv = "TPC_BENCH_FOLLOWER"

	// Targets from the issue, at N=8; reported, never asserted.
	bcTargetP50Ratio = 1.5
	bcTargetP99Ratio = 2.0

	bcReadyTimeout = 60 * time.Second
)

type benchBroadcastOptions struct {
	followers []int
	payload   int
	interval  time.Duration
	messages  int
	json      bool
	natsURL   string // an external server instead of the embedded one
}

// benchBroadcastResult is one JSON line of `tpcoord bench broadcast`: one
// (transport, followers) case. Latencies are publish-to-receive over all
// followers' messages after the warm-up.
type benchBroadcastResult struct {
	Transport      string  `json:"transport"`
	Followers      int     `json:"followers"`
	Payload        int     `json:"payload"`
	IntervalUS     float64 `json:"interval_us"`
	SentIntervalUS float64 `json:"sent_interval_us"` // achieved mean interval
	Messages       int     `json:"messages"`
	Warmup         int     `json:"warmup"`
	Samples        int     `json:"samples"`
	P50US          float64 `json:"p50_us"`
	P90US          float64 `json:"p90_us"`
	P99US          float64 `json:"p99_us"`
	MaxUS          float64 `json:"max_us"`
	Lost           int     `json:"lost"`
	// NATS over raw TCP for this follower count, same run; on both lines.
	P50RatioNATSTCP float64 `json:"p50_ratio_nats_tcp"`
	P99RatioNATSTCP float64 `json:"p99_ratio_nats_tcp"`
	TargetP50Ratio  float64 `json:"target_p50_ratio"`
	TargetP99Ratio  float64 `json:"target_p99_ratio"`
	// TargetsMet applies the N=8 targets' thresholds to this N's ratios.
	TargetsMet bool   `json:"targets_met"`
	CPU        string `json:"cpu"`
	Cores      int    `json:"cores"`
	Go         string `json:"go"`
}

// newBenchBroadcastCmd returns `tpcoord bench broadcast`: publish-to-receive
// latency from one publisher to N follower processes, through embedded NATS
// and through a raw TCP fan-out (the floor), in the same run.
func newBenchBroadcastCmd() *cobra.Command {
	var o benchBroadcastOptions
	cmd := &cobra.Command{
		Use:   "broadcast",
		Short: "Time step fan-out to N follower processes: embedded NATS vs raw TCP",
		Long: `Spawns N follower processes (this binary, hidden subcommand
broadcast-follower) for every listed N and publishes --messages messages of
--payload bytes every --interval to all of them, first over a raw TCP fan-out
(the publisher writes each length-prefixed message to every connection in
turn), then over an embedded NATS server. Each message carries its wall-clock
send time; followers report receive minus send. The first 5% of messages are
warm-up and not counted. Prints, per (transport, N), p50/p90/p99/max in µs,
lost messages, and the NATS/TCP ratios of p50 and p99. Progress goes to
stderr.

The publisher paces itself with nanosleep system calls, because Go's timers
wake ~1 ms late on Linux; sent_interval_us reports the achieved interval.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.validate(); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runBenchBroadcast(ctx, cmd.OutOrStdout(), cmd.ErrOrStderr(), o)
		},
	}
	f := cmd.Flags()
	f.IntSliceVar(&o.followers, "followers", []int{1, 4, 8}, "follower process counts, comma-separated (1..64)")
	f.IntVar(&o.payload, "payload", 256, "message size in bytes (16..1048576; the first 16 are the header)")
	f.DurationVar(&o.interval, "interval", 200*time.Microsecond, "time between two published messages")
	f.IntVar(&o.messages, "messages", 5000, "messages per case (>= 10; the first 5% are warm-up)")
	f.BoolVar(&o.json, "json", false, "print one JSON object per line")
	f.StringVar(&o.natsURL, "nats", "", "use this NATS server (e.g. one in its own process) instead of an embedded one")
	return cmd
}

func (o benchBroadcastOptions) validate() error {
	if len(o.followers) == 0 {
		return configError("--followers: give at least one count")
	}
	for _, n := range o.followers {
		if n < 1 || n > bcMaxFollow {
			return configError("--followers: %d is outside 1..%d", n, bcMaxFollow)
		}
	}
	if o.payload < bcMinPayload || o.payload > bcMaxPayload {
		return configError("--payload: %d is outside %d..%d bytes", o.payload, bcMinPayload, bcMaxPayload)
	}
	if o.interval <= 0 {
		return configError("--interval: must be > 0, got %v", o.interval)
	}
	if o.messages < bcMinMsgs {
		return configError("--messages: must be >= %d, got %d", bcMinMsgs, o.messages)
	}
	return nil
}

// bcWarmup is the number of leading messages not counted: 5%, at least 1.
func bcWarmup(messages int) int { return max(1, messages/20) }

// bcFollowerDeadline bounds a follower's life, so a lost end marker or a
// stuck publisher cannot keep it running.
func bcFollowerDeadline(o benchBroadcastOptions) time.Duration {
	return bcReadyTimeout + 3*time.Duration(o.messages)*o.interval + 10*time.Second
}

func runBenchBroadcast(ctx context.Context, stdout, stderr io.Writer, o benchBroadcastOptions) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("locate own binary: %w", err)
	}
	url := o.natsURL
	if url == "" {
		srv, embedded, err := startEmbeddedNATS()
		if err != nil {
			return err
		}
		defer func() {
			srv.Shutdown()
			srv.WaitForShutdown()
		}()
		url = embedded
	}
	nc, err := nats.Connect(url, nats.Name("tpcoord-bench-publisher"), nats.Timeout(5*time.Second))
	if err != nil {
		return fmt.Errorf("connect to NATS: %w", err)
	}
	defer nc.Close()

	cpu, cores, gover := cpuModel(), runtime.NumCPU(), runtime.Version()
	if !o.json {
		fmt.Fprintf(stdout, "%s, %d cores, %s; payload %d B, interval %v, %d messages (%d warm-up)\n",
			cpu, cores, gover, o.payload, o.interval, o.messages, bcWarmup(o.messages))
		fmt.Fprintf(stdout, "%-9s %9s %9s %9s %9s %9s %6s %9s %9s %9s\n",
			"transport", "followers", "p50_us", "p90_us", "p99_us", "max_us", "lost", "sent_us", "p50/tcp", "p99/tcp")
	}
	for i, n := range o.followers {
		c := bcCase{self: self, natsURL: url, o: o, n: n, progress: stderr}
		tcp, err := c.run(ctx, "tcp", "", nil)
		if err != nil {
			return fmt.Errorf("tcp, %d followers: %w", n, err)
		}
		subject := "tpcoord.bench.broadcast." + strconv.Itoa(i)
		nr, err := c.run(ctx, "nats", subject, nc)
		if err != nil {
			return fmt.Errorf("nats, %d followers: %w", n, err)
		}
		for _, r := range []*benchBroadcastResult{&tcp, &nr} {
			if tcp.P50US > 0 && tcp.P99US > 0 {
				r.P50RatioNATSTCP, r.P99RatioNATSTCP = nr.P50US/tcp.P50US, nr.P99US/tcp.P99US
			}
			r.TargetP50Ratio, r.TargetP99Ratio = bcTargetP50Ratio, bcTargetP99Ratio
			r.TargetsMet = r.P50RatioNATSTCP > 0 && r.P50RatioNATSTCP <= bcTargetP50Ratio && r.P99RatioNATSTCP <= bcTargetP99Ratio
			r.CPU, r.Cores, r.Go = cpu, cores, gover
			if err := printBenchBroadcast(stdout, *r, o.json); err != nil {
				return err
			}
		}
	}
	return nil
}

func printBenchBroadcast(w io.Writer, r benchBroadcastResult, asJSON bool) error {
	if asJSON {
		return writeJSONLine(w, r)
	}
	_, err := fmt.Fprintf(w, "%-9s %9d %9.0f %9.0f %9.0f %9.0f %6d %9.0f %8.2fx %8.2fx\n",
		r.Transport, r.Followers, r.P50US, r.P90US, r.P99US, r.MaxUS, r.Lost, r.SentIntervalUS,
		r.P50RatioNATSTCP, r.P99RatioNATSTCP)
	return err
}

// bcCase runs one (transport, followers) case.
type bcCase struct {
	self     string
	natsURL  string // carries the embedded server's token
	o        benchBroadcastOptions
	n        int
	progress io.Writer
}

// bcExit is what a follower's owner goroutine hands back once the follower
// process has exited.
type bcExit struct {
	id     int
	lat    []int64
	err    error
	stderr string
}

// bcFollowerReport is the follower's final stdout line: receive minus send
// in ns per sequence number, -1 for a message never received.
type bcFollowerReport struct {
	LatNS []int64 `json:"lat_ns"`
}

// bcChildren owns the follower processes of one case: each has a goroutine
// that reads its stdout ("ready", then the report) and waits for it.
type bcChildren struct {
	cmds    []*exec.Cmd
	readyCh chan int
	exits   chan bcExit
	exited  int
	wg      sync.WaitGroup
}

func (c *bcCase) spawn(transport, addr, subject string) (*bcChildren, error) {
	ch := &bcChildren{readyCh: make(chan int, c.n), exits: make(chan bcExit, c.n)}
	for id := range c.n {
		args := []string{"bench", "broadcast-follower", "--transport", transport, "--addr", addr,
			"--messages", strconv.Itoa(c.o.messages), "--deadline", bcFollowerDeadline(c.o).String()}
		if subject != "" {
			args = append(args, "--subject", subject)
		}
		cmd := exec.Command(c.self, args...)
		cmd.Env = append(os.Environ(), benchFollowerEnv+"=1")
		cmd.SysProcAttr = childProcAttr()
		var errBuf bytes.Buffer
		cmd.Stderr = &errBuf
		out, err := cmd.StdoutPipe()
		if err == nil {
			err = cmd.Start()
		}
		if err != nil {
			ch.stop()
			return nil, fmt.Errorf("start follower %d: %w", id, err)
		}
		ch.cmds = append(ch.cmds, cmd)
		ch.wg.Go(func() {
			var rep bcFollowerReport
			br := bufio.NewReader(out)
			line, err := br.ReadString('\n')
			if err == nil && line != "ready\n" {
				err = fmt.Errorf("unexpected first line %q", line)
			}
			if err == nil {
				ch.readyCh <- id
				err = json.NewDecoder(br).Decode(&rep)
			}
			_, _ = io.Copy(io.Discard, br) // Wait must not run before stdout is drained
			werr := cmd.Wait()
			if err != nil && werr != nil {
				err = werr // the exit status explains the short read
			}
			ch.exits <- bcExit{id: id, lat: rep.LatNS, err: errors.Join(err, werr), stderr: tail(errBuf.String(), 500)}
		})
	}
	return ch, nil
}

// stop kills every follower that has not exited yet and waits for all of
// their owner goroutines. Safe to call on every path, more than once.
func (ch *bcChildren) stop() {
	for _, cmd := range ch.cmds {
		// Kill on an exited-and-waited process returns an error, ignored.
		_ = cmd.Process.Kill()
	}
	for ch.exited < len(ch.cmds) {
		<-ch.exits
		ch.exited++
	}
	ch.wg.Wait()
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

func (c *bcCase) run(ctx context.Context, transport, subject string, nc *nats.Conn) (benchBroadcastResult, error) {
	res := benchBroadcastResult{Transport: transport, Followers: c.n, Payload: c.o.payload,
		IntervalUS: us(c.o.interval.Nanoseconds()), Messages: c.o.messages, Warmup: bcWarmup(c.o.messages)}
	fmt.Fprintf(c.progress, "bench broadcast: %s, %d followers: starting\n", transport, c.n)

	var (
		ln    net.Listener
		conns []net.Conn
		addr  string
	)
	if transport == "tcp" {
		var err error
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return res, err
		}
		defer ln.Close()
		addr = ln.Addr().String()
		defer func() {
			for _, cn := range conns {
				cn.Close()
			}
		}()
	} else {
		addr = c.natsURL
	}

	ch, err := c.spawn(transport, addr, subject)
	if err != nil {
		return res, err
	}
	defer ch.stop()

	if err := c.awaitReady(ctx, ch); err != nil {
		return res, err
	}
	if ln != nil {
		// Every follower printed "ready" after connecting, so all N
		// connections are in the accept backlog.
		_ = ln.(*net.TCPListener).SetDeadline(time.Now().Add(10 * time.Second))
		for range c.n {
			cn, err := ln.Accept()
			if err != nil {
				return res, fmt.Errorf("accept follower: %w", err)
			}
			conns = append(conns, cn)
		}
	}

	var send func(msg []byte) error
	if transport == "tcp" {
		frame := make([]byte, 4+c.o.payload)
		binary.LittleEndian.PutUint32(frame, uint32(c.o.payload))
		send = func(msg []byte) error {
			copy(frame[4:], msg)
			for _, cn := range conns {
				if _, err := cn.Write(frame); err != nil {
					return fmt.Errorf("write to follower: %w", err)
				}
			}
			return nil
		}
	} else {
		send = func(msg []byte) error { return nc.Publish(subject, msg) }
	}
	sent, err := c.publish(ctx, transport, send)
	if err != nil {
		return res, err
	}
	res.SentIntervalUS = sent
	if transport == "nats" {
		if err := nc.FlushTimeout(10 * time.Second); err != nil {
			return res, fmt.Errorf("flush: %w", err)
		}
	}

	lats, lost, err := c.collect(ctx, ch)
	if err != nil {
		return res, err
	}
	res.Lost, res.Samples = lost, len(lats)
	if len(lats) > 0 {
		slices.Sort(lats)
		res.P50US, res.P90US, res.P99US = us(pct(lats, 0.50)), us(pct(lats, 0.90)), us(pct(lats, 0.99))
		res.MaxUS = us(lats[len(lats)-1])
	}
	fmt.Fprintf(c.progress, "bench broadcast: %s, %d followers: done (p50 %.0f µs, p99 %.0f µs, lost %d)\n",
		transport, c.n, res.P50US, res.P99US, res.Lost)
	return res, nil
}

func (c *bcCase) awaitReady(ctx context.Context, ch *bcChildren) error {
	timer := time.NewTimer(bcReadyTimeout)
	defer timer.Stop()
	for ready := 0; ready < c.n; {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch.readyCh:
			ready++
		case e := <-ch.exits:
			ch.exited++
			return fmt.Errorf("follower %d exited before it was ready: %v %s", e.id, e.err, e.stderr)
		case <-timer.C:
			return fmt.Errorf("followers not ready after %v", bcReadyTimeout)
		}
	}
	return nil
}

// publish sends the messages on a fixed schedule and then the end marker.
// It returns the achieved mean interval in µs.
func (c *bcCase) publish(ctx context.Context, transport string, send func([]byte) error) (float64, error) {
	msg := make([]byte, c.o.payload)
	lastProgress := time.Now()
	start := time.Now()
	next := start
	for seq := range c.o.messages {
		if err := waitUntil(ctx, next); err != nil {
			return 0, err
		}
		binary.LittleEndian.PutUint64(msg, uint64(seq))
		binary.LittleEndian.PutUint64(msg[8:], uint64(time.Now().UnixNano()))
		if err := send(msg); err != nil {
			return 0, err
		}
		next = next.Add(c.o.interval)
		// After a stall (a descheduled publisher) drop the debt instead of
		// sending a burst, which would measure queueing, not fan-out.
		if now := time.Now(); now.Sub(next) > c.o.interval {
			next = now.Add(c.o.interval)
		}
		if now := time.Now(); now.Sub(lastProgress) >= 2*time.Second {
			lastProgress = now
			fmt.Fprintf(c.progress, "bench broadcast: %s, %d followers: %d/%d sent\n", transport, c.n, seq+1, c.o.messages)
		}
	}
	sent := us(time.Since(start).Nanoseconds()) / float64(c.o.messages)
	binary.LittleEndian.PutUint64(msg, bcEndSeq)
	binary.LittleEndian.PutUint64(msg[8:], uint64(time.Now().UnixNano()))
	return sent, send(msg)
}

// waitUntil sleeps until t in nanosleep system calls. Go's timers on Linux
// wake up ~1 ms late (the netpoller waits in whole milliseconds), which would
// turn a 200 µs interval into bursts of five messages every millisecond, and
// spinning instead takes a core from the followers (measured here on two
// cores: NATS p50 2.5× higher at N=8, 16× at N=1). The kernel's timer slack (50 µs) makes nanosleep wake a
// little late; the schedule is absolute, so that does not accumulate.
func waitUntil(ctx context.Context, t time.Time) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		d := time.Until(t)
		if d <= 0 {
			return nil
		}
		// Chunks of at most 10 ms keep long intervals cancellable.
		pause(min(d, 10*time.Millisecond))
	}
}

// collect waits for every follower's report and pools the latencies after
// the warm-up.
func (c *bcCase) collect(ctx context.Context, ch *bcChildren) ([]int64, int, error) {
	timeout := bcFollowerDeadline(c.o) + 10*time.Second
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	warm := bcWarmup(c.o.messages)
	lats := make([]int64, 0, c.n*(c.o.messages-warm))
	lost := 0
	for ch.exited < c.n {
		select {
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		case <-timer.C:
			return nil, 0, fmt.Errorf("%d followers did not report within %v", c.n-ch.exited, timeout)
		case e := <-ch.exits:
			ch.exited++
			if e.err != nil {
				return nil, 0, fmt.Errorf("follower %d: %w %s", e.id, e.err, e.stderr)
			}
			if len(e.lat) != c.o.messages {
				return nil, 0, fmt.Errorf("follower %d reported %d latencies, want %d", e.id, len(e.lat), c.o.messages)
			}
			for seq, l := range e.lat {
				switch {
				case l < 0:
					lost++
				case seq >= warm:
					lats = append(lats, l)
				}
			}
		}
	}
	return lats, lost, nil
}

// pct is the nearest-rank q-quantile of sorted values.
func pct(sorted []int64, q float64) int64 {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func us(ns int64) float64 { return float64(ns) / 1e3 }

type benchBroadcastFollowerOptions struct {
	transport string
	addr      string
	subject   string
	messages  int
	deadline  time.Duration
}

// newBenchBroadcastFollowerCmd returns the hidden `tpcoord bench
// broadcast-follower` that `bench broadcast` spawns: it receives the
// messages, prints "ready" once subscribed or connected, and, after the end
// marker, all messages or the deadline, one JSON line of latencies.
func newBenchBroadcastFollowerCmd() *cobra.Command {
	var o benchBroadcastFollowerOptions
	cmd := &cobra.Command{
		Use:    "broadcast-follower",
		Short:  "Follower process of bench broadcast (internal)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runBenchBroadcastFollower(cmd.OutOrStdout(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.transport, "transport", "", "nats or tcp")
	f.StringVar(&o.addr, "addr", "", "NATS URL or TCP host:port of the publisher")
	f.StringVar(&o.subject, "subject", "", "NATS subject")
	f.IntVar(&o.messages, "messages", 0, "messages the publisher sends")
	f.DurationVar(&o.deadline, "deadline", time.Minute, "give up and report after this long")
	return cmd
}

func runBenchBroadcastFollower(w io.Writer, o benchBroadcastFollowerOptions) error {
	switch {
	case o.transport != "nats" && o.transport != "tcp":
		return configError("--transport: %q is not one of nats, tcp", o.transport)
	case o.addr == "":
		return configError("--addr: required")
	case o.transport == "nats" && o.subject == "":
		return configError("--subject: required with --transport nats")
	case o.messages < 1:
		return configError("--messages: must be > 0, got %d", o.messages)
	case o.deadline <= 0:
		return configError("--deadline: must be > 0, got %v", o.deadline)
	}
	rec := newBcRecorder(o.messages)
	deadline := time.Now().Add(o.deadline)
	var err error
	if o.transport == "nats" {
		err = followNATS(w, o, rec, deadline)
	} else {
		err = followTCP(w, o, rec, deadline)
	}
	if err != nil {
		return err
	}
	b, err := json.Marshal(bcFollowerReport{LatNS: rec.snapshot()})
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// bcRecorder keeps receive-minus-send per sequence number. record may run on
// a NATS callback goroutine while the owner waits on done.
type bcRecorder struct {
	mu    sync.Mutex
	lat   []int64
	got   int
	done  chan struct{}
	ended bool
}

func newBcRecorder(n int) *bcRecorder {
	r := &bcRecorder{lat: make([]int64, n), done: make(chan struct{})}
	for i := range r.lat {
		r.lat[i] = -1
	}
	return r
}

// record takes the receive time and a message; it reports whether the run
// is over for this follower (end marker, or every message received).
func (r *bcRecorder) record(now int64, msg []byte) bool {
	if len(msg) < bcHeaderLen {
		return false
	}
	seq := binary.LittleEndian.Uint64(msg)
	sentAt := int64(binary.LittleEndian.Uint64(msg[8:]))
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ended {
		return true
	}
	if seq < uint64(len(r.lat)) && r.lat[seq] < 0 {
		r.lat[seq] = max(0, now-sentAt)
		r.got++
	}
	if seq == bcEndSeq || r.got == len(r.lat) {
		r.ended = true
		close(r.done)
	}
	return r.ended
}

func (r *bcRecorder) snapshot() []int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ended = true // late NATS callbacks change nothing from here on
	return slices.Clone(r.lat)
}

func followNATS(w io.Writer, o benchBroadcastFollowerOptions, rec *bcRecorder, deadline time.Time) error {
	nc, err := nats.Connect(o.addr, nats.Name("tpcoord-bench-follower"), nats.Timeout(5*time.Second))
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer nc.Close()
	sub, err := nc.Subscribe(o.subject, func(m *nats.Msg) {
		rec.record(time.Now().UnixNano(), m.Data)
	})
	if err != nil {
		return fmt.Errorf("subscribe: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	// The server has the subscription once the flush round-trip returns.
	if err := nc.Flush(); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	if _, err := fmt.Fprintln(w, "ready"); err != nil {
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

func followTCP(w io.Writer, o benchBroadcastFollowerOptions, rec *bcRecorder, deadline time.Time) error {
	cn, err := net.DialTimeout("tcp", o.addr, 5*time.Second)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer cn.Close()
	if err := cn.SetReadDeadline(deadline); err != nil {
		return err
	}
	if _, err := fmt.Fprintln(w, "ready"); err != nil {
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
		if n > bcMaxPayload {
			return fmt.Errorf("frame of %d bytes exceeds %d", n, bcMaxPayload)
		}
		if cap(buf) < int(n) {
			buf = make([]byte, n)
		}
		buf = buf[:n]
		if _, err := io.ReadFull(br, buf); err != nil {
			return nil
		}
		if rec.record(time.Now().UnixNano(), buf) && binary.LittleEndian.Uint64(buf) == bcEndSeq {
			return nil
		}
	}
}
