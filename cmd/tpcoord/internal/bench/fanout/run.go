package fanout

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/tpcoord/tpcoord/cmd/tpcoord/internal/bench/stats"
)

// Result is one JSON line of `tpcoord bench broadcast`: one (transport,
// MAC, followers) case. Latencies are publish-to-receive over all
// followers' messages after the warm-up; each figure is the median over
// the rounds of that round's figure (max: the largest).
type Result struct {
	Transport string `json:"transport"`
	// MAC: the publisher sealed every message with a keyed MAC and every
	// follower verified it before taking the receive time (--mac).
	MAC            bool    `json:"mac"`
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
	// the ratio within the round (the cases run back to back). On the tcp
	// line, the ratio of NATS without a MAC.
	P50RatioNATSTCP float64 `json:"p50_ratio_nats_tcp"`
	P99RatioNATSTCP float64 `json:"p99_ratio_nats_tcp"`
	TargetP50Ratio  float64 `json:"target_p50_ratio"`
	TargetP99Ratio  float64 `json:"target_p99_ratio"`
	// TargetsMet applies the N=8 targets' thresholds to this N's ratios;
	// a lost message in either case fails it.
	TargetsMet  bool   `json:"targets_met"`
	NATSServer  string `json:"nats_server"` // "own-process" (as under launch), "in-publisher" (launch --nats-in-rank0) or "external"
	TuneRuntime bool   `json:"tune_runtime"`
	stats.Machine
}

// caseKind is one case of a round: a transport, with or without a MAC.
type caseKind struct {
	transport string
	mac       bool
}

func (k caseKind) String() string {
	if k.mac {
		return k.transport + "+mac"
	}
	return k.transport
}

// kinds are the cases of each round, in the order of their index: the raw
// TCP floor first (the others' ratios divide by it), NATS, with --mac NATS
// with a MAC on every message, and torch.distributed's gloo broadcast;
// each when its transport is one of o's.
func (o Options) kinds() []caseKind {
	var k []caseKind
	for _, t := range transportNames {
		if !o.has(t) {
			continue
		}
		k = append(k, caseKind{transport: t})
		if t == "nats" && o.MAC {
			k = append(k, caseKind{transport: t, mac: true})
		}
	}
	return k
}

// Run runs the benchmark o (see Options) and writes one line per
// (follower count, transport) to stdout, a table or JSON lines, and its
// progress to progress.
func Run(ctx context.Context, o Options, stdout, progress io.Writer) error {
	if err := o.Validate(); err != nil {
		return err
	}
	if o.MAC {
		dir, err := o.writeKey()
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
	}
	if o.has("gloo") {
		dir, err := o.writeGloo()
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
	}
	m := stats.ThisMachine()
	if !o.JSON {
		fmt.Fprintf(stdout, "%s, %d cores, %s; payload %d B, interval %v, %d messages (%d warm-up), %d rounds, NATS server %s, tune-runtime %v\n",
			m.CPU, m.Cores, m.Go, o.Payload, o.Interval, o.Messages, Warmup(o.Messages), o.Rounds, o.server(), o.TuneRuntime)
		fmt.Fprintf(stdout, "%-9s %9s %9s %9s %9s %9s %6s %9s %9s %9s %9s %9s %9s\n",
			"transport", "followers", "p50_us", "p90_us", "p99_us", "max_us", "lost", "sent_us", "fcpu_us", "pcpu_us", "scpu_us", "p50/tcp", "p99/tcp")
	}
	for i, n := range o.Followers {
		rounds, err := runRounds(ctx, o, i, n, progress)
		if err != nil {
			return err
		}
		for _, r := range results(o, n, rounds) {
			r.Machine = m
			if err := printResult(stdout, r, o.JSON); err != nil {
				return err
			}
		}
	}
	return nil
}

// runRounds runs o.Rounds rounds of every case for n followers, their
// order rotating from round to round (with two cases: alternating). i
// numbers the follower count, to give every case a NATS subject of its
// own.
func runRounds(ctx context.Context, o Options, i, n int, progress io.Writer) ([][]round, error) {
	kinds := o.kinds()
	rounds := make([][]round, len(kinds)) // indexed like kinds
	for r := range o.Rounds {
		for j := range kinds {
			t := (j + r) % len(kinds)
			c := fanoutCase{o: o, n: n, kind: kinds[t], round: r,
				subject: fmt.Sprintf("tpcoord.bench.broadcast.%d.%d.%d", i, r, t), progress: progress}
			res, err := c.run(ctx)
			if err != nil {
				return rounds, fmt.Errorf("%s, %d followers, round %d: %w", c.kind, n, r+1, err)
			}
			rounds[t] = append(rounds[t], res)
		}
	}
	return rounds, nil
}

// ratios are the medians over rounds of case's p50 and p99 over tcp's in
// the same round, and the messages either lost.
func ratios(tcp, other []round) (p50, p99 float64, lost int) {
	var p50r, p99r []float64
	for r := range tcp {
		t, nr := tcp[r], other[r]
		lost += t.lost + nr.lost
		if t.p50 > 0 && t.p99 > 0 && nr.p50 > 0 && nr.p99 > 0 { // 0: nothing received
			p50r = append(p50r, nr.p50/t.p50)
			p99r = append(p99r, nr.p99/t.p99)
		}
	}
	return stats.Median(p50r), stats.Median(p99r), lost
}

// results are the lines of n followers, one per case, from their rounds
// (indexed like o.kinds()).
func results(o Options, n int, rounds [][]round) []Result {
	kinds := o.kinds()
	tcp, nats := slices.Index(kinds, caseKind{transport: "tcp"}), slices.Index(kinds, caseKind{transport: "nats"})
	out := make([]Result, len(rounds))
	for t, kind := range kinds {
		r := summarize(rounds[t])
		r.Transport, r.MAC, r.Followers, r.Payload = kind.transport, kind.mac, n, o.Payload
		r.IntervalUS, r.Messages, r.Warmup, r.Rounds = stats.US(o.Interval.Nanoseconds()), o.Messages, Warmup(o.Messages), o.Rounds
		r.TargetP50Ratio, r.TargetP99Ratio = TargetP50Ratio, TargetP99Ratio
		// Every case over tcp; the tcp line carries NATS's ratios.
		other := t
		if t == tcp {
			other = nats
		}
		if tcp >= 0 && other >= 0 && other != tcp {
			p50, p99, lost := ratios(rounds[tcp], rounds[other])
			r.P50RatioNATSTCP, r.P99RatioNATSTCP = p50, p99
			r.TargetsMet = lost == 0 && p50 > 0 && p50 <= TargetP50Ratio && p99 <= TargetP99Ratio
		}
		r.NATSServer, r.TuneRuntime = o.server(), o.TuneRuntime
		out[t] = r
	}
	return out
}

// round is one case's figures in one round: latencies and CPU per message
// in µs.
type round struct {
	p50, p90, p99, max float64
	lost, samples      int
	sent, fcpu, pcpu   float64
	scpu               float64
}

// summarize is the per-round medians of rs (max: the largest; lost: the
// sum; samples: the fewest).
func summarize(rs []round) Result {
	pick := func(f func(round) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		return stats.Median(v)
	}
	var res Result
	res.P50US = pick(func(r round) float64 { return r.p50 })
	res.P90US = pick(func(r round) float64 { return r.p90 })
	res.P99US = pick(func(r round) float64 { return r.p99 })
	res.SentIntervalUS = pick(func(r round) float64 { return r.sent })
	res.FollowerCPUUS = pick(func(r round) float64 { return r.fcpu })
	res.PublisherCPUUS = pick(func(r round) float64 { return r.pcpu })
	res.ServerCPUUS = pick(func(r round) float64 { return r.scpu })
	for i, r := range rs {
		res.MaxUS = max(res.MaxUS, r.max)
		res.Lost += r.lost
		if i == 0 || r.samples < res.Samples {
			res.Samples = r.samples
		}
	}
	return res
}

func printResult(w io.Writer, r Result, asJSON bool) error {
	if asJSON {
		return stats.WriteJSONLine(w, r)
	}
	_, err := fmt.Fprintf(w, "%-9s %9d %9.0f %9.0f %9.0f %9.0f %6d %9.0f %9.1f %9.1f %9.1f %8.2fx %8.2fx\n",
		caseKind{r.Transport, r.MAC}, r.Followers, r.P50US, r.P90US, r.P99US, r.MaxUS, r.Lost, r.SentIntervalUS,
		r.FollowerCPUUS, r.PublisherCPUUS, r.ServerCPUUS, r.P50RatioNATSTCP, r.P99RatioNATSTCP)
	return err
}
