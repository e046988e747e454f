package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
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
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/broadcast/natsbus"
	"github.com/tpcoord/tpcoord/internal/rankproc"
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
	bcMaxRounds  = 100
	// bcEndSeq marks the message that tells a follower the run is over.
	bcEndSeq = math.MaxUint64

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
	rounds    int
	json      bool
	natsURL   string // an external server instead of the embedded one
	inPub     bool   // the embedded server in the publisher (launch --nats-in-rank0)
	tune      bool   // give the processes the runtime settings launch gives ranks
}

// benchBroadcastResult is one JSON line of `tpcoord bench broadcast`: one
// (transport, followers) case. Latencies are publish-to-receive over all
// followers' messages after the warm-up; each figure is the median over
// the rounds of that round's figure (max: the largest).
type benchBroadcastResult struct {
	Transport      string  `json:"transport"`
	Followers      int     `json:"followers"`
	Payload        int     `json:"payload"`
	IntervalUS     float64 `json:"interval_us"`
	SentIntervalUS float64 `json:"sent_interval_us"` // achieved mean interval
	Messages       int     `json:"messages"`
	Warmup         int     `json:"warmup"`
	Rounds         int     `json:"rounds"`
	Samples        int     `json:"samples"` // latencies per round (the fewest of any round)
	P50US          float64 `json:"p50_us"`
	P90US          float64 `json:"p90_us"`
	P99US          float64 `json:"p99_us"`
	MaxUS          float64 `json:"max_us"`
	Lost           int     `json:"lost"` // over all rounds
	// CPU time (user+system) per published message: all followers
	// together, and the publishing process (with the embedded NATS server
	// when there is one), from the start signal to the end.
	FollowerCPUUS  float64 `json:"follower_cpu_us_per_msg"`
	PublisherCPUUS float64 `json:"publisher_cpu_us_per_msg"`
	// ServerCPUUS is the NATS server's process when it has one of its own
	// (from its start to the end of the case; 0 otherwise).
	ServerCPUUS float64 `json:"server_cpu_us_per_msg"`
	// NATS over raw TCP for this follower count: the median over rounds of
	// the ratio within the round (the two cases run back to back). On both
	// lines.
	P50RatioNATSTCP float64 `json:"p50_ratio_nats_tcp"`
	P99RatioNATSTCP float64 `json:"p99_ratio_nats_tcp"`
	TargetP50Ratio  float64 `json:"target_p50_ratio"`
	TargetP99Ratio  float64 `json:"target_p99_ratio"`
	// TargetsMet applies the N=8 targets' thresholds to this N's ratios;
	// a lost message in either case fails it.
	TargetsMet  bool   `json:"targets_met"`
	NATSServer  string `json:"nats_server"` // "own-process" (as under launch), "in-publisher" (launch --nats-in-rank0) or "external"
	TuneRuntime bool   `json:"tune_runtime"`
	CPU         string `json:"cpu"`
	Cores       int    `json:"cores"`
	Go          string `json:"go"`
}

// newBenchBroadcastCmd returns `tpcoord bench broadcast`: publish-to-receive
// latency from one publisher process to N follower processes, through NATS
// and through a raw TCP fan-out (the floor), in the same run.
func newBenchBroadcastCmd() *cobra.Command {
	var o benchBroadcastOptions
	cmd := &cobra.Command{
		Use:   "broadcast",
		Short: "Time step fan-out to N follower processes: NATS vs raw TCP",
		Long: `For every listed N, runs --rounds rounds of two cases back to back (their
order alternating): a raw TCP fan-out, where the publisher writes each
length-prefixed message to every follower's connection in turn (the floor),
and NATS. Each case spawns one publisher and N follower processes (this
binary, hidden subcommands broadcast-publisher and broadcast-follower) and
publishes --messages messages of --payload bytes every --interval. Each
message carries its wall-clock send time; followers report receive minus
send. The first 5% of messages are warm-up and not counted.

The NATS case is set up as launch sets up a job: an embedded NATS server in a
process of its own (as launch hosts it), the publisher playing rank 0 (its
step connection writes every publish through) and followers that connect
and subscribe as agents do. --server-in-publisher moves the server into the
publisher, reached in-process (launch --nats-in-rank0); --nats uses that
server instead. With --tune-runtime (the default) every process gets the Go
runtime settings launch gives ranks and itself (see launch --help), in both
cases.

Prints, per (transport, N), the medians over rounds of p50/p90/p99 (max: the
largest) in µs, lost messages, CPU per message of the followers, of the publisher
and of the server process, and the median over rounds of the NATS/TCP ratios of p50 and
p99. Progress goes to stderr. The publisher paces itself with a timerfd
(Go's timers wake ~1 ms late); sent_interval_us reports the achieved
interval.`,
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
	f.IntVar(&o.rounds, "rounds", 3, "rounds of (tcp, nats) per follower count; figures are medians over rounds")
	f.BoolVar(&o.json, "json", false, "print one JSON object per line")
	f.StringVar(&o.natsURL, "nats", "", "use this NATS server instead of an embedded one")
	f.BoolVar(&o.inPub, "server-in-publisher", false, "embed the NATS server in the publisher, reached in-process (as launch --nats-in-rank0)")
	f.BoolVar(&o.tune, "tune-runtime", true, "give every process the Go runtime settings launch gives ranks (GOMAXPROCS = cores/processes, GODEBUG=schedtrace for sysmon)")
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
	if o.rounds < 1 || o.rounds > bcMaxRounds {
		return configError("--rounds: %d is outside 1..%d", o.rounds, bcMaxRounds)
	}
	if o.inPub && o.natsURL != "" {
		return configError("--server-in-publisher: not with --nats (the server is given)")
	}
	return nil
}

// bcWarmup is the number of leading messages not counted: 5%, at least 1.
func bcWarmup(messages int) int { return max(1, messages/20) }

// bcFollowerDeadline bounds a spawned process's life, so a lost end marker
// or a stuck publisher cannot keep it running.
func bcFollowerDeadline(messages int, interval time.Duration) time.Duration {
	return bcReadyTimeout + 3*time.Duration(messages)*interval + 10*time.Second
}

func runBenchBroadcast(ctx context.Context, stdout, stderr io.Writer, o benchBroadcastOptions) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("locate own binary: %w", err)
	}
	server := "own-process"
	switch {
	case o.natsURL != "":
		server = "external"
	case o.inPub:
		server = "in-publisher"
	}
	cpu, cores, gover := cpuModel(), runtime.NumCPU(), runtime.Version()
	if !o.json {
		fmt.Fprintf(stdout, "%s, %d cores, %s; payload %d B, interval %v, %d messages (%d warm-up), %d rounds, NATS server %s, tune-runtime %v\n",
			cpu, cores, gover, o.payload, o.interval, o.messages, bcWarmup(o.messages), o.rounds, server, o.tune)
		fmt.Fprintf(stdout, "%-9s %9s %9s %9s %9s %9s %6s %9s %9s %9s %9s %9s %9s\n",
			"transport", "followers", "p50_us", "p90_us", "p99_us", "max_us", "lost", "sent_us", "fcpu_us", "pcpu_us", "scpu_us", "p50/tcp", "p99/tcp")
	}
	for i, n := range o.followers {
		var rounds [2][]bcRound // tcp, nats
		for r := range o.rounds {
			order := []int{0, 1}
			if r%2 == 1 {
				order = []int{1, 0}
			}
			for _, t := range order {
				c := bcCase{self: self, o: o, n: n, transport: [2]string{"tcp", "nats"}[t], round: r,
					subject: fmt.Sprintf("tpcoord.bench.broadcast.%d.%d", i, r), progress: stderr}
				res, err := c.run(ctx)
				if err != nil {
					return fmt.Errorf("%s, %d followers, round %d: %w", c.transport, n, r+1, err)
				}
				rounds[t] = append(rounds[t], res)
			}
		}
		var p50r, p99r []float64
		lost := 0
		for r := range o.rounds {
			t, nr := rounds[0][r], rounds[1][r]
			lost += t.lost + nr.lost
			if t.p50 > 0 && t.p99 > 0 && nr.p50 > 0 && nr.p99 > 0 { // 0: nothing received
				p50r = append(p50r, nr.p50/t.p50)
				p99r = append(p99r, nr.p99/t.p99)
			}
		}
		for t, name := range []string{"tcp", "nats"} {
			r := summarize(rounds[t])
			r.Transport, r.Followers, r.Payload = name, n, o.payload
			r.IntervalUS, r.Messages, r.Warmup, r.Rounds = us(o.interval.Nanoseconds()), o.messages, bcWarmup(o.messages), o.rounds
			r.P50RatioNATSTCP, r.P99RatioNATSTCP = median(p50r), median(p99r)
			r.TargetP50Ratio, r.TargetP99Ratio = bcTargetP50Ratio, bcTargetP99Ratio
			r.TargetsMet = lost == 0 && r.P50RatioNATSTCP > 0 && r.P50RatioNATSTCP <= bcTargetP50Ratio && r.P99RatioNATSTCP <= bcTargetP99Ratio
			r.NATSServer, r.TuneRuntime = server, o.tune
			r.CPU, r.Cores, r.Go = cpu, cores, gover
			if err := printBenchBroadcast(stdout, r, o.json); err != nil {
				return err
			}
		}
	}
	return nil
}

// bcRound is one case's figures in one round.
type bcRound struct {
	p50, p90, p99, max float64
	lost, samples      int
	sent, fcpu, pcpu   float64
	scpu               float64
}

func summarize(rs []bcRound) benchBroadcastResult {
	pick := func(f func(bcRound) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		return median(v)
	}
	var res benchBroadcastResult
	res.P50US = pick(func(r bcRound) float64 { return r.p50 })
	res.P90US = pick(func(r bcRound) float64 { return r.p90 })
	res.P99US = pick(func(r bcRound) float64 { return r.p99 })
	res.SentIntervalUS = pick(func(r bcRound) float64 { return r.sent })
	res.FollowerCPUUS = pick(func(r bcRound) float64 { return r.fcpu })
	res.PublisherCPUUS = pick(func(r bcRound) float64 { return r.pcpu })
	res.ServerCPUUS = pick(func(r bcRound) float64 { return r.scpu })
	for i, r := range rs {
		res.MaxUS = max(res.MaxUS, r.max)
		res.Lost += r.lost
		if i == 0 || r.samples < res.Samples {
			res.Samples = r.samples
		}
	}
	return res
}

// median of v (the mean of the middle two for an even count); 0 if empty.
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func printBenchBroadcast(w io.Writer, r benchBroadcastResult, asJSON bool) error {
	if asJSON {
		return writeJSONLine(w, r)
	}
	_, err := fmt.Fprintf(w, "%-9s %9d %9.0f %9.0f %9.0f %9.0f %6d %9.0f %9.1f %9.1f %9.1f %8.2fx %8.2fx\n",
		r.Transport, r.Followers, r.P50US, r.P90US, r.P99US, r.MaxUS, r.Lost, r.SentIntervalUS,
		r.FollowerCPUUS, r.PublisherCPUUS, r.ServerCPUUS, r.P50RatioNATSTCP, r.P99RatioNATSTCP)
	return err
}

// bcCase runs one (transport, followers) case of one round.
type bcCase struct {
	self      string
	o         benchBroadcastOptions
	n         int
	transport string
	round     int
	subject   string
	progress  io.Writer
}

// bcProc is one spawned process of a case. Its owner goroutine hands every
// line of its stdout to lines (the first line, then one JSON report) and
// closes done once the process has exited.
type bcProc struct {
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser // the publisher's; nil for followers
	lines  chan string
	done   chan struct{}
	err    error // valid once done is closed
	stderr bytes.Buffer
}

// bcProcs owns the processes of one case.
type bcProcs struct {
	procs []*bcProc
	wg    sync.WaitGroup
}

func (ps *bcProcs) start(self, name string, args []string, env []string, withStdin bool) (*bcProc, error) {
	p := &bcProc{name: name, lines: make(chan string, 2), done: make(chan struct{})}
	p.cmd = exec.Command(self, args...)
	p.cmd.Env = append(env, runAsTPCoordEnv+"=1")
	p.cmd.SysProcAttr = rankproc.DieWithParent()
	p.cmd.Stderr = &p.stderr
	out, err := p.cmd.StdoutPipe()
	if err == nil && withStdin {
		p.stdin, err = p.cmd.StdinPipe()
	}
	if err == nil {
		err = p.cmd.Start()
	}
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	ps.procs = append(ps.procs, p)
	ps.wg.Go(func() {
		br := bufio.NewReader(out)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				break
			}
			select {
			case p.lines <- strings.TrimSuffix(line, "\n"):
			default: // more lines than the protocol has: ignored
			}
		}
		p.err = p.cmd.Wait() // stdout is drained: Wait may run now
		close(p.done)
	})
	return p, nil
}

// line waits for p's next stdout line until deadline.
func (p *bcProc) line(ctx context.Context, deadline time.Time, what string) (string, error) {
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case l := <-p.lines:
		return l, nil
	case <-p.done:
		select {
		case l := <-p.lines:
			return l, nil
		default:
		}
		return "", fmt.Errorf("%s exited before %s: %v %s", p.name, what, p.err, tail(p.stderr.String(), 500))
	case <-ctx.Done():
		return "", ctx.Err()
	case <-timer.C:
		return "", fmt.Errorf("%s: no %s by the deadline", p.name, what)
	}
}

// stop kills every process still running and waits for their owners.
// Safe on every path.
func (ps *bcProcs) stop() {
	for _, p := range ps.procs {
		if p.stdin != nil {
			p.stdin.Close()
		}
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
		}
	}
	ps.wg.Wait()
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// bcPublisherReport is the publisher's report line (the server's has only
// the CPU time).
type bcPublisherReport struct {
	SentIntervalUS float64 `json:"sent_interval_us"`
	CPUNS          int64   `json:"cpu_ns"`
}

func (c *bcCase) run(ctx context.Context) (bcRound, error) {
	var res bcRound
	fmt.Fprintf(c.progress, "bench broadcast: round %d, %s, %d followers: starting\n", c.round+1, c.transport, c.n)
	var ps bcProcs
	defer ps.stop()
	life := bcFollowerDeadline(c.o.messages, c.o.interval)
	readyBy := time.Now().Add(bcReadyTimeout)
	natsURL := c.o.natsURL
	var srv *bcProc
	if c.transport == "nats" && natsURL == "" && !c.o.inPub {
		// The server in a process of its own, tuned as launch tunes itself
		// (one process more than the ranks share the host with).
		var err error
		srv, err = ps.start(c.self, "NATS server", []string{"bench", "broadcast-server"}, rankproc.Env(os.Environ(), c.n+2, c.o.tune), true)
		if err != nil {
			return res, err
		}
		first, err := srv.line(ctx, readyBy, "its URL")
		if err != nil {
			return res, err
		}
		var ok bool
		if natsURL, ok = strings.CutPrefix(first, "addr "); !ok {
			return res, fmt.Errorf("NATS server: unexpected first line %q", first)
		}
	}
	args := []string{"bench", "broadcast-publisher", "--transport", c.transport, "--followers", strconv.Itoa(c.n),
		"--payload", strconv.Itoa(c.o.payload), "--interval", c.o.interval.String(), "--messages", strconv.Itoa(c.o.messages),
		"--subject", c.subject, "--nats", natsURL}
	pub, err := ps.start(c.self, "publisher", args, rankproc.Env(os.Environ(), c.n+1, c.o.tune), true)
	if err != nil {
		return res, err
	}
	first, err := pub.line(ctx, readyBy, "its address")
	if err != nil {
		return res, err
	}
	addr, ok := strings.CutPrefix(first, "addr ")
	if !ok {
		return res, fmt.Errorf("publisher: unexpected first line %q", first)
	}
	var followers []*bcProc
	for id := range c.n {
		args := []string{"bench", "broadcast-follower", "--transport", c.transport, "--addr", addr,
			"--subject", c.subject, "--messages", strconv.Itoa(c.o.messages), "--deadline", life.String()}
		f, err := ps.start(c.self, fmt.Sprintf("follower %d", id), args, rankproc.Env(os.Environ(), c.n+1, c.o.tune), false)
		if err != nil {
			return res, err
		}
		followers = append(followers, f)
	}
	for _, f := range followers {
		l, err := f.line(ctx, readyBy, `"ready"`)
		if err != nil {
			return res, err
		}
		if l != "ready" {
			return res, fmt.Errorf("%s: unexpected first line %q", f.name, l)
		}
	}
	if _, err := io.WriteString(pub.stdin, "go\n"); err != nil {
		return res, fmt.Errorf("start the publisher: %w", err)
	}

	// Collect the followers' latencies, then the publisher's report.
	doneBy := time.Now().Add(life + 10*time.Second)
	warm := bcWarmup(c.o.messages)
	lats := make([]int64, 0, c.n*(c.o.messages-warm))
	var fcpu time.Duration
	for _, f := range followers {
		l, err := f.line(ctx, doneBy, "its report")
		if err != nil {
			return res, err
		}
		var rep bcFollowerReport
		if err := json.Unmarshal([]byte(l), &rep); err != nil {
			return res, fmt.Errorf("%s: report: %w", f.name, err)
		}
		if len(rep.LatNS) != c.o.messages {
			return res, fmt.Errorf("%s reported %d latencies, want %d", f.name, len(rep.LatNS), c.o.messages)
		}
		fcpu += time.Duration(rep.CPUNS)
		for seq, l := range rep.LatNS {
			switch {
			case l < 0:
				res.lost++
			case seq >= warm:
				lats = append(lats, l)
			}
		}
	}
	l, err := pub.line(ctx, doneBy, "its report")
	if err != nil {
		return res, err
	}
	var prep bcPublisherReport
	if err := json.Unmarshal([]byte(l), &prep); err != nil {
		return res, fmt.Errorf("publisher: report: %w", err)
	}
	for _, p := range ps.procs {
		if p.stdin != nil {
			p.stdin.Close() // the publisher and the server exit once stdin ends
		}
	}
	if srv != nil {
		l, err := srv.line(ctx, time.Now().Add(10*time.Second), "its report")
		if err != nil {
			return res, err
		}
		var rep bcPublisherReport
		if err := json.Unmarshal([]byte(l), &rep); err != nil {
			return res, fmt.Errorf("NATS server: report: %w", err)
		}
		res.scpu = us(rep.CPUNS) / float64(c.o.messages)
	}
	for _, p := range ps.procs {
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			return res, fmt.Errorf("%s did not exit within 10s of the end", p.name)
		}
		if p.err != nil {
			return res, fmt.Errorf("%s: %v %s", p.name, p.err, tail(p.stderr.String(), 500))
		}
	}

	res.samples, res.sent = len(lats), prep.SentIntervalUS
	res.fcpu = us(fcpu.Nanoseconds()) / float64(c.o.messages)
	res.pcpu = us(prep.CPUNS) / float64(c.o.messages)
	if len(lats) > 0 {
		slices.Sort(lats)
		res.p50, res.p90, res.p99 = us(pct(lats, 0.50)), us(pct(lats, 0.90)), us(pct(lats, 0.99))
		res.max = us(lats[len(lats)-1])
	}
	fmt.Fprintf(c.progress, "bench broadcast: round %d, %s, %d followers: p50 %.0f µs, p99 %.0f µs, lost %d, CPU per message: followers %.1f µs, publisher %.1f µs, server %.1f µs\n",
		c.round+1, c.transport, c.n, res.p50, res.p99, res.lost, res.fcpu, res.pcpu, res.scpu)
	return res, nil
}

// pct is the nearest-rank q-quantile of sorted values.
func pct(sorted []int64, q float64) int64 {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func us(ns int64) float64 { return float64(ns) / 1e3 }

// newBenchBroadcastServerCmd returns the hidden `tpcoord bench
// broadcast-server` that `bench broadcast` spawns for the NATS case: an
// embedded NATS server on loopback with a random token, in a process of
// its own as under launch. It prints "addr URL", runs until stdin ends and
// then prints {"cpu_ns"} (its CPU time since it started serving).
func newBenchBroadcastServerCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "broadcast-server",
		Short:  "NATS server process of bench broadcast (internal)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runBenchBroadcastServer(cmd.InOrStdin(), cmd.OutOrStdout())
		},
	}
}

func runBenchBroadcastServer(stdin io.Reader, stdout io.Writer) error {
	srv, err := natsbus.ServeLoopback()
	if err != nil {
		return err
	}
	defer srv.Close()
	cpu0 := selfCPU()
	if _, err := fmt.Fprintf(stdout, "addr %s\n", srv.URL()); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, stdin)
	return writeJSONLine(stdout, bcPublisherReport{CPUNS: int64(selfCPU() - cpu0)})
}

type benchBroadcastPublisherOptions struct {
	transport string
	followers int
	payload   int
	interval  time.Duration
	messages  int
	subject   string
	natsURL   string
}

// newBenchBroadcastPublisherCmd returns the hidden `tpcoord bench
// broadcast-publisher` that `bench broadcast` spawns. It prints "addr
// ADDR" (a TCP host:port, or the NATS URL followers connect to), waits
// for "go" on stdin, publishes, prints one JSON report line, and exits
// when stdin ends (an embedded NATS server must outlive the followers'
// reception).
func newBenchBroadcastPublisherCmd() *cobra.Command {
	var o benchBroadcastPublisherOptions
	cmd := &cobra.Command{
		Use:    "broadcast-publisher",
		Short:  "Publisher process of bench broadcast (internal)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runBenchBroadcastPublisher(cmd.Context(), cmd.InOrStdin(), cmd.OutOrStdout(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.transport, "transport", "", "nats or tcp")
	f.IntVar(&o.followers, "followers", 0, "tcp: connections to accept")
	f.IntVar(&o.payload, "payload", 256, "message size in bytes")
	f.DurationVar(&o.interval, "interval", 200*time.Microsecond, "time between two messages")
	f.IntVar(&o.messages, "messages", 0, "messages to publish")
	f.StringVar(&o.subject, "subject", "", "NATS subject")
	f.StringVar(&o.natsURL, "nats", "", "NATS server URL (empty: embed one)")
	return cmd
}

func runBenchBroadcastPublisher(ctx context.Context, stdin io.Reader, stdout io.Writer, o benchBroadcastPublisherOptions) error {
	switch {
	case o.transport != "nats" && o.transport != "tcp":
		return configError("--transport: %q is not one of nats, tcp", o.transport)
	case o.transport == "tcp" && (o.followers < 1 || o.followers > bcMaxFollow):
		return configError("--followers: %d is outside 1..%d", o.followers, bcMaxFollow)
	case o.transport == "nats" && o.subject == "":
		return configError("--subject: required with --transport nats")
	case o.payload < bcMinPayload || o.payload > bcMaxPayload:
		return configError("--payload: %d is outside %d..%d bytes", o.payload, bcMinPayload, bcMaxPayload)
	case o.interval <= 0:
		return configError("--interval: must be > 0, got %v", o.interval)
	case o.messages < 1:
		return configError("--messages: must be > 0, got %d", o.messages)
	}
	pc, err := newPacer()
	if err != nil {
		return err
	}
	defer pc.Close()

	var (
		ln   net.Listener
		nc   *natsbus.Conn
		addr string
	)
	if o.transport == "tcp" {
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return err
		}
		defer ln.Close()
		addr = ln.Addr().String()
	} else {
		// As rank 0 under launch: the server in this process, reached
		// in-process, every publish written through.
		cfg := natsbus.Config{URL: o.natsURL, Name: "tpcoord-bench-publisher", WriteThrough: true}
		if o.natsURL == "" {
			srv, err := natsbus.ServeLoopback()
			if err != nil {
				return err
			}
			defer srv.Close()
			cfg.URL, cfg.InProcess = srv.URL(), srv
		}
		if nc, err = natsbus.Connect(cfg); err != nil {
			return err
		}
		defer nc.Close()
		addr = cfg.URL
	}
	if _, err := fmt.Fprintf(stdout, "addr %s\n", addr); err != nil {
		return err
	}
	in := bufio.NewReader(stdin)
	if line, err := in.ReadString('\n'); err != nil || line != "go\n" {
		return fmt.Errorf("waiting for \"go\" on stdin: got %q, %v", line, err)
	}

	var send func([]byte) error
	if ln != nil {
		// Every follower printed "ready" after connecting, so all of them
		// are in the accept backlog.
		_ = ln.(*net.TCPListener).SetDeadline(time.Now().Add(10 * time.Second))
		var conns []net.Conn
		defer func() {
			for _, cn := range conns {
				cn.Close()
			}
		}()
		for range o.followers {
			cn, err := ln.Accept()
			if err != nil {
				return fmt.Errorf("accept follower: %w", err)
			}
			conns = append(conns, cn)
		}
		frame := make([]byte, 4+o.payload)
		binary.LittleEndian.PutUint32(frame, uint32(o.payload))
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
		send = func(msg []byte) error { return nc.Publish(&broadcast.Msg{Subject: o.subject, Data: msg}) }
	}

	cpu0 := selfCPU()
	sent, err := bcPublish(ctx, pc, o, send)
	if err != nil {
		return err
	}
	if nc != nil {
		fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := nc.Flush(fctx)
		cancel()
		if err != nil {
			return fmt.Errorf("flush: %w", err)
		}
	}
	if err := writeJSONLine(stdout, bcPublisherReport{SentIntervalUS: sent, CPUNS: int64(selfCPU() - cpu0)}); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, in) // until stdin ends: the followers have everything
	return nil
}

// bcPublish sends the messages on a fixed schedule and then the end
// marker. It returns the achieved mean interval in µs.
func bcPublish(ctx context.Context, pc *pacer, o benchBroadcastPublisherOptions, send func([]byte) error) (float64, error) {
	msg := make([]byte, o.payload)
	start := time.Now()
	next := start
	for seq := range o.messages {
		for d := time.Until(next); d > 0; d = time.Until(next) {
			if err := ctx.Err(); err != nil {
				return 0, err
			}
			if err := pc.sleep(min(d, 100*time.Millisecond)); err != nil {
				return 0, err
			}
		}
		binary.LittleEndian.PutUint64(msg, uint64(seq))
		binary.LittleEndian.PutUint64(msg[8:], uint64(time.Now().UnixNano()))
		if err := send(msg); err != nil {
			return 0, err
		}
		next = next.Add(o.interval)
		// After a stall (a descheduled publisher) drop the debt instead of
		// sending a burst, which would measure queueing, not fan-out.
		if now := time.Now(); now.Sub(next) > o.interval {
			next = now.Add(o.interval)
		}
	}
	sent := us(time.Since(start).Nanoseconds()) / float64(o.messages)
	binary.LittleEndian.PutUint64(msg, bcEndSeq)
	binary.LittleEndian.PutUint64(msg[8:], uint64(time.Now().UnixNano()))
	return sent, send(msg)
}

// bcFollowerReport is the follower's report line: receive minus send in ns
// per sequence number (-1 for a message never received), and its CPU time
// from "ready" to the report.
type bcFollowerReport struct {
	LatNS []int64 `json:"lat_ns"`
	CPUNS int64   `json:"cpu_ns"`
}

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
	var cpu0 time.Duration
	ready := func() error {
		cpu0 = selfCPU()
		_, err := fmt.Fprintln(w, "ready")
		return err
	}
	var err error
	if o.transport == "nats" {
		err = followNATS(o, rec, deadline, ready)
	} else {
		err = followTCP(o, rec, deadline, ready)
	}
	if err != nil {
		return err
	}
	b, err := json.Marshal(bcFollowerReport{LatNS: rec.snapshot(), CPUNS: int64(selfCPU() - cpu0)})
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

// followNATS subscribes as an agent does (natsbus: its options and
// pending limits).
func followNATS(o benchBroadcastFollowerOptions, rec *bcRecorder, deadline time.Time, ready func() error) error {
	nc, err := natsbus.Connect(natsbus.Config{URL: o.addr, Name: "tpcoord-bench-follower"})
	if err != nil {
		return err
	}
	defer nc.Close()
	unsub, err := nc.Subscribe(o.subject, func(m *broadcast.Msg) {
		rec.record(time.Now().UnixNano(), m.Data)
	})
	if err != nil {
		return err
	}
	defer func() { _ = unsub() }()
	// The server has the subscription once the flush round-trip returns.
	if err := nc.Flush(context.Background()); err != nil {
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

func followTCP(o benchBroadcastFollowerOptions, rec *bcRecorder, deadline time.Time, ready func() error) error {
	cn, err := net.DialTimeout("tcp", o.addr, 5*time.Second)
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
