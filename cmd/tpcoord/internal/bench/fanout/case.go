package fanout

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/tpcoord/tpcoord/cmd/tpcoord/internal/bench/stats"
	"github.com/tpcoord/tpcoord/internal/rankproc"
)

// fanoutCase runs one (transport, MAC, followers) case of one round: it starts
// the processes (a NATS server of its own when the case needs one, the
// publisher, n followers), starts the publisher once every follower is
// ready, and collects their reports.
type fanoutCase struct {
	o        Options
	n        int
	kind     caseKind
	round    int
	subject  string
	progress io.Writer
}

// publisherReport is the publisher's report line (the server's has only
// the CPU time).
type publisherReport struct {
	SentIntervalUS float64 `json:"sent_interval_us"`
	CPUNS          int64   `json:"cpu_ns"`
}

// followerReport is a follower's report line: receive minus send in ns per
// sequence number (-1 for a message never received), and its CPU time
// from "ready" to the report.
type followerReport struct {
	LatNS []int64 `json:"lat_ns"`
	CPUNS int64   `json:"cpu_ns"`
	// BadMAC counts messages whose MAC did not verify (with a key): not
	// recorded, and an error of the case.
	BadMAC int `json:"bad_mac,omitempty"`
}

func (c *fanoutCase) run(ctx context.Context) (round, error) {
	fmt.Fprintf(c.progress, "bench broadcast: round %d, %s, %d followers: starting\n", c.round+1, c.kind, c.n)
	var ps procs
	defer ps.stop()
	readyBy := time.Now().Add(readyTimeout)
	srv, natsURL, err := c.startServer(ctx, &ps, readyBy)
	if err != nil {
		return round{}, err
	}
	pub, addr, err := c.startPublisher(ctx, &ps, natsURL, readyBy)
	if err != nil {
		return round{}, err
	}
	followers, err := c.startFollowers(ctx, &ps, addr, readyBy)
	if err != nil {
		return round{}, err
	}
	if _, err := io.WriteString(pub.stdin, "go\n"); err != nil {
		return round{}, fmt.Errorf("start the publisher: %w", err)
	}
	res, err := c.collect(ctx, &ps, srv, pub, followers)
	if err != nil {
		return round{}, err
	}
	fmt.Fprintf(c.progress, "bench broadcast: round %d, %s, %d followers: p50 %.0f µs, p99 %.0f µs, lost %d, CPU per message: followers %.1f µs, publisher %.1f µs, server %.1f µs\n",
		c.round+1, c.kind, c.n, res.p50, res.p99, res.lost, res.fcpu, res.pcpu, res.scpu)
	return res, nil
}

// keyArgs give a process of a MAC case the key file.
func (c *fanoutCase) keyArgs() []string {
	if !c.kind.mac {
		return nil
	}
	return []string{"--job-key-file", c.o.keyFile}
}

// life bounds the life of the case's processes.
func (c *fanoutCase) life() time.Duration { return followerDeadline(c.o.Messages, c.o.Interval) }

// env is the environment of a process of the case, tuned for procs
// processes on the host.
func (c *fanoutCase) env(procs int) []string {
	return rankproc.Env(os.Environ(), procs, c.o.TuneRuntime)
}

// startServer starts the NATS server in a process of its own when the
// case needs one, and returns it and the URL to publish to (o's --nats,
// or empty for the publisher to embed one).
func (c *fanoutCase) startServer(ctx context.Context, ps *procs, readyBy time.Time) (*proc, string, error) {
	if c.kind.transport != "nats" || c.o.NATSURL != "" || c.o.ServerInPublisher {
		return nil, c.o.NATSURL, nil
	}
	// Tuned as launch tunes itself: one process more than the ranks share
	// the host with.
	srv, err := ps.start(c.o.Self, "NATS server", []string{"bench", "broadcast-server"}, c.env(c.n+2), true)
	if err != nil {
		return nil, "", err
	}
	url, err := srv.firstLine(ctx, readyBy, "its URL", "addr ")
	return srv, url, err
}

// startPublisher starts the publisher and returns it and the address its
// followers connect to.
func (c *fanoutCase) startPublisher(ctx context.Context, ps *procs, natsURL string, readyBy time.Time) (*proc, string, error) {
	path, args := c.o.Self, []string{"bench", "broadcast-publisher", "--transport", c.kind.transport, "--followers", strconv.Itoa(c.n),
		"--payload", strconv.Itoa(c.o.Payload), "--interval", c.o.Interval.String(), "--messages", strconv.Itoa(c.o.Messages),
		"--subject", c.subject, "--nats", natsURL}
	args = append(args, c.keyArgs()...)
	if c.kind.transport == "gloo" {
		path, args = c.glooPublisher()
	}
	pub, err := ps.start(path, "publisher", args, c.env(c.n+1), true)
	if err != nil {
		return nil, "", err
	}
	addr, err := pub.firstLine(ctx, readyBy, "its address", "addr ")
	return pub, addr, err
}

// startFollowers starts the n followers and waits until each is ready.
func (c *fanoutCase) startFollowers(ctx context.Context, ps *procs, addr string, readyBy time.Time) ([]*proc, error) {
	var followers []*proc
	for id := range c.n {
		path, args := c.o.Self, []string{"bench", "broadcast-follower", "--transport", c.kind.transport, "--addr", addr,
			"--subject", c.subject, "--messages", strconv.Itoa(c.o.Messages), "--deadline", c.life().String()}
		args = append(args, c.keyArgs()...)
		if c.kind.transport == "gloo" {
			path, args = c.glooFollower(id, addr)
		}
		f, err := ps.start(path, fmt.Sprintf("follower %d", id), args, c.env(c.n+1), false)
		if err != nil {
			return nil, err
		}
		followers = append(followers, f)
	}
	for _, f := range followers {
		l, err := f.line(ctx, readyBy, `"ready"`)
		if err != nil {
			return nil, err
		}
		if l != "ready" {
			return nil, fmt.Errorf("%s: unexpected first line %q", f.name, l)
		}
	}
	return followers, nil
}

// collect reads the followers' reports, then the publisher's, ends the
// publisher and the server and waits for every process to exit.
func (c *fanoutCase) collect(ctx context.Context, ps *procs, srv, pub *proc, followers []*proc) (round, error) {
	var res round
	doneBy := time.Now().Add(c.life() + 10*time.Second)
	lats, fcpu, err := c.followerReports(ctx, followers, doneBy, &res.lost)
	if err != nil {
		return res, err
	}
	var prep publisherReport
	if err := pub.report(ctx, doneBy, &prep); err != nil {
		return res, err
	}
	ps.closeStdins()
	if srv != nil {
		var rep publisherReport
		if err := srv.report(ctx, time.Now().Add(exitTimeout), &rep); err != nil {
			return res, err
		}
		res.scpu = stats.US(rep.CPUNS) / float64(c.o.Messages)
	}
	if err := ps.waitExited(exitTimeout); err != nil {
		return res, err
	}
	res.samples, res.sent = len(lats), prep.SentIntervalUS
	res.fcpu = stats.US(fcpu.Nanoseconds()) / float64(c.o.Messages)
	res.pcpu = stats.US(prep.CPUNS) / float64(c.o.Messages)
	if len(lats) > 0 {
		slices.Sort(lats)
		res.p50, res.p90, res.p99 = stats.US(stats.Nearest(lats, 0.50)), stats.US(stats.Nearest(lats, 0.90)), stats.US(stats.Nearest(lats, 0.99))
		res.max = stats.US(lats[len(lats)-1])
	}
	return res, nil
}

// followerReports reads every follower's report and returns the latencies
// after the warm-up, pooled, and the followers' CPU time; it counts the
// messages some follower never received in lost.
func (c *fanoutCase) followerReports(ctx context.Context, followers []*proc, doneBy time.Time, lost *int) ([]int64, time.Duration, error) {
	warm := Warmup(c.o.Messages)
	lats := make([]int64, 0, c.n*(c.o.Messages-warm))
	var cpu time.Duration
	for _, f := range followers {
		var rep followerReport
		if err := f.report(ctx, doneBy, &rep); err != nil {
			return nil, 0, err
		}
		if len(rep.LatNS) != c.o.Messages {
			return nil, 0, fmt.Errorf("%s reported %d latencies, want %d", f.name, len(rep.LatNS), c.o.Messages)
		}
		if rep.BadMAC > 0 {
			return nil, 0, fmt.Errorf("%s refused %d messages whose MAC did not verify", f.name, rep.BadMAC)
		}
		cpu += time.Duration(rep.CPUNS)
		for seq, l := range rep.LatNS {
			switch {
			case l < 0:
				*lost++
			case seq >= warm:
				lats = append(lats, l)
			}
		}
	}
	return lats, cpu, nil
}
