// Command soak runs a tpcoord job for a while under a schedule of faults
// and reports how it held up. scripts/soak.sh builds tpcoord and this
// program and runs it in a temporary directory:
//
//	scripts/soak.sh --duration 10m
//
// It starts Debian's nats-server with the shipped configuration
// (configs/nats/nats-server.conf: a user for rank 0, one for the other
// ranks, one for clients; random passwords, a free loopback port), one
// `tpcoord agent` per rank by hand, under --on-peer-loss wait, and a
// gateway (`tpcoord serve`), each with its NATS credentials in its
// environment. While a steady mix of requests runs, every other one
// through the Go client (rank/client.Generate) and the others through the
// gateway (streaming /v1/completions), it kills and restarts followers
// and rank 0, restarts the NATS server, freezes a follower, and floods the
// job's subjects with hostile and forged messages. A process that exits
// by itself is restarted, as systemd would, and the exit recorded. At the
// end every rank's digest is compared, and every request that finished
// with a seed (the soak's, or the one the gateway reported) is run again
// on a fresh, fault-free job with the same flags, by the same path: its
// tokens must be the same. The report adds, per fault kind, the latency
// the faults added to the requests in flight at them.
//
// In the directory: events.jsonl, requests.jsonl, faults.jsonl,
// status.jsonl, procs.jsonl, replay.jsonl, summary.json, summary.md, and
// the processes' logs under soak/ and replay/.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// options are the command's flags.
type options struct {
	bin, dir, natsConf string
	duration           time.Duration
	warmup, cooldown   time.Duration
	faultGap           time.Duration
	faults             string
	rate               float64
	maxInFlight        int
	requestTimeout     time.Duration
	world, vocab       int
	forwardTime        time.Duration
	agentFlags         string
	stopFor, natsDown  time.Duration
	floodMessages      int
	forged             int
	jobKey             string
	seed               uint64
	replay             bool
	replayConc         int
	pollEvery          time.Duration
	sampleEvery        time.Duration
}

func parseFlags(args []string) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.StringVar(&o.bin, "bin", "", "the tpcoord binary (required)")
	fs.StringVar(&o.dir, "dir", "", "directory for the logs and reports (required; scripts/soak.sh makes a temporary one)")
	fs.StringVar(&o.natsConf, "nats-conf", "configs/nats/nats-server.conf", "NATS configuration to adapt (job name, port, passwords)")
	fs.DurationVar(&o.duration, "duration", 10*time.Minute, "how long the load and the faults run")
	fs.DurationVar(&o.warmup, "warmup", 0, "load without faults at the start (0: duration/20, 5s to 30s)")
	fs.DurationVar(&o.cooldown, "cooldown", 0, "load without faults at the end (0: duration/10, 10s to 60s)")
	fs.DurationVar(&o.faultGap, "fault-gap", 30*time.Second, "the least time between two faults")
	fs.StringVar(&o.faults, "faults", strings.Join(faultKinds, ","), "fault kinds, in the order the schedule cycles through them")
	fs.Float64Var(&o.rate, "rate", 6, "requests submitted per second")
	fs.IntVar(&o.maxInFlight, "max-inflight", 16, "most requests in flight (a submission that finds them all busy is skipped)")
	fs.DurationVar(&o.requestTimeout, "request-timeout", 2*time.Minute, "the soak's deadline for one request")
	fs.IntVar(&o.world, "world-size", 4, "ranks")
	fs.IntVar(&o.vocab, "vocab", 32768, "vocabulary size")
	fs.DurationVar(&o.forwardTime, "forward-time", 10*time.Millisecond, "synthetic executor's forward time")
	fs.StringVar(&o.agentFlags, "agent-flags", "", "more flags for every agent, space-separated")
	fs.DurationVar(&o.stopFor, "stop-for", 2*time.Second, "how long a follower stays SIGSTOPped")
	fs.DurationVar(&o.natsDown, "nats-down", time.Second, "how long the NATS server stays dead")
	fs.IntVar(&o.floodMessages, "flood-messages", 2000, "hostile messages per flood")
	fs.IntVar(&o.forged, "forged", 3, "forged steps per flood")
	fs.StringVar(&o.jobKey, "job-key", "auto", "per-job MAC key (--job-key-file): auto (if the agent has the flag), on, off")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the request mix and of the flood")
	fs.BoolVar(&o.replay, "replay", true, "replay the seeded requests on a fresh job and compare")
	fs.IntVar(&o.replayConc, "replay-concurrency", 16, "requests in flight during the replay")
	fs.DurationVar(&o.pollEvery, "poll", 500*time.Millisecond, "status poll interval")
	fs.DurationVar(&o.sampleEvery, "sample", 3*time.Second, "RSS and file descriptor sampling interval")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	return o, o.check()
}

func (o *options) check() error {
	switch {
	case o.bin == "" || o.dir == "":
		return fmt.Errorf("--bin and --dir are required")
	case o.duration <= 0 || o.rate <= 0 || o.maxInFlight <= 0 || o.world < 2:
		return fmt.Errorf("--duration, --rate and --max-inflight must be positive, --world-size at least 2")
	case o.jobKey != "auto" && o.jobKey != "on" && o.jobKey != "off":
		return fmt.Errorf("--job-key: auto, on or off, got %q", o.jobKey)
	}
	for _, k := range strings.Split(o.faults, ",") {
		if !contains(faultKinds, k) {
			return fmt.Errorf("--faults: unknown kind %q (known: %s)", k, strings.Join(faultKinds, ","))
		}
	}
	if o.warmup == 0 {
		o.warmup = min(max(o.duration/20, 5*time.Second), 30*time.Second)
	}
	if o.cooldown == 0 {
		o.cooldown = min(max(o.duration/10, 10*time.Second), 60*time.Second)
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func main() {
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		stop()
		os.Exit(1)
	}
}
