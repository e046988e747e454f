//go:build !agentonly

package main

import (
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/tpcoord/tpcoord/cmd/tpcoord/internal/bench/fanout"
)

// benchBroadcastLong is the help text of bench broadcast.
const benchBroadcastLong = `For every listed N, runs --rounds rounds of one case per transport of
--transports, back to back, their order rotating from round to round:

  tcp   a raw TCP fan-out, the floor: the publisher writes each
        length-prefixed message to every follower's connection in turn;
  nats  set up as launch sets up a job (below);
  gloo  torch.distributed's broadcast on the gloo backend, the path a
        plain PyTorch TP loop ships its tokens on: a binomial tree, in which
        followers forward to followers.

With --mac one more case, NATS with a MAC on every message: the publisher
seals each message with an HMAC-SHA256 under a job key, as rank 0 seals its
steps, after taking its send time, and each follower verifies it before
taking the receive time, so its cost is in the latency and in the CPU per
message.

Each case spawns one publisher and N follower processes (for tcp and nats
this binary, hidden subcommands broadcast-publisher and broadcast-follower;
for gloo a Python helper embedded in this binary, run by --python or else
/usr/bin/python3 or python3, whichever has PyTorch) and publishes
--messages messages of --payload bytes every --interval. Each message
carries its wall-clock send time; followers report receive minus send. The
first 5% of messages are warm-up and not counted. Without PyTorch gloo is
skipped with a note on stderr, or, when --transports or --python is given,
the run fails.

The NATS case is set up as launch sets up a job: an embedded NATS server in a
process of its own (as launch hosts it), the publisher playing rank 0 (its
step connection writes every publish through) and followers that connect
and subscribe as agents do. --server-in-publisher moves the server into the
publisher, reached in-process (launch --nats-in-rank0); --nats uses that
server instead. With --tune-runtime (the default) every Go process gets the
Go runtime settings launch gives ranks and itself (see launch --help).

Prints, per (transport, N), the medians over rounds of p50/p90/p99 (max: the
largest) in µs, lost messages, CPU per message of the followers, of the
publisher and of the server process, and the medians over rounds of the
ratios of p50 and p99 over tcp's in the same round (on the tcp line:
NATS's). Progress goes to stderr. The Go publisher paces itself with a
timerfd (Go's timers wake ~1 ms late), the gloo one with time.sleep;
sent_interval_us reports the achieved interval.`

// newBenchBroadcastCmd returns `tpcoord bench broadcast`: publish-to-receive
// latency from one publisher process to N follower processes, through NATS,
// through a raw TCP fan-out (the floor) and through torch.distributed's
// gloo broadcast, in the same run.
func newBenchBroadcastCmd() *cobra.Command {
	var o fanout.Options
	cmd := &cobra.Command{
		Use:   "broadcast",
		Short: "Time step fan-out to N follower processes: NATS vs raw TCP vs gloo",
		Long:  benchBroadcastLong,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if o.Self, err = benchSelf(); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return benchConfigError(err)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if err := o.ResolveGloo(ctx, cmd.Flags().Changed("transports"), fanout.DefaultPythons, cmd.ErrOrStderr()); err != nil {
				return benchConfigError(err)
			}
			return fanout.Run(ctx, o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.IntSliceVar(&o.Followers, "followers", []int{1, 4, 8}, "follower process counts, comma-separated (1..64)")
	f.IntVar(&o.Payload, "payload", 256, "message size in bytes (16..1048576; the first 16 are the header)")
	f.DurationVar(&o.Interval, "interval", 200*time.Microsecond, "time between two published messages")
	f.IntVar(&o.Messages, "messages", 5000, "messages per case (>= 10; the first 5% are warm-up)")
	f.IntVar(&o.Rounds, "rounds", 3, "rounds of every case per follower count; figures are medians over rounds")
	f.BoolVar(&o.JSON, "json", false, "print one JSON object per line")
	f.StringVar(&o.NATSURL, "nats", "", "use this NATS server instead of an embedded one")
	f.BoolVar(&o.ServerInPublisher, "server-in-publisher", false, "embed the NATS server in the publisher, reached in-process (as launch --nats-in-rank0)")
	f.BoolVar(&o.TuneRuntime, "tune-runtime", true, "give every process the Go runtime settings launch gives ranks (GOMAXPROCS = cores/processes, GODEBUG=schedtrace for sysmon)")
	f.StringSliceVar(&o.Transports, "transports", []string{"tcp", "nats", "gloo"}, "transports to measure, of tcp, nats, gloo (gloo: skipped without PyTorch unless given here)")
	f.StringVar(&o.Python, "python", "", "Python with PyTorch for gloo (default: /usr/bin/python3, then python3)")
	f.BoolVar(&o.MAC, "mac", false, "also run a NATS case whose publisher seals every message with a keyed MAC (the job key's) and whose followers verify it, interleaved with the others")
	return cmd
}

// newBenchBroadcastServerCmd returns the hidden `tpcoord bench
// broadcast-server` that `bench broadcast` starts for the NATS case
// (fanout.RunServer).
func newBenchBroadcastServerCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "broadcast-server",
		Short:  "NATS server process of bench broadcast (internal)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return fanout.RunServer(cmd.InOrStdin(), cmd.OutOrStdout())
		},
	}
}

// newBenchBroadcastPublisherCmd returns the hidden `tpcoord bench
// broadcast-publisher` that `bench broadcast` starts
// (fanout.RunPublisher).
func newBenchBroadcastPublisherCmd() *cobra.Command {
	var o fanout.PublisherOptions
	cmd := &cobra.Command{
		Use:    "broadcast-publisher",
		Short:  "Publisher process of bench broadcast (internal)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return benchConfigError(err)
			}
			return fanout.RunPublisher(cmd.Context(), cmd.InOrStdin(), cmd.OutOrStdout(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Transport, "transport", "", "nats or tcp")
	f.IntVar(&o.Followers, "followers", 0, "tcp: connections to accept")
	f.IntVar(&o.Payload, "payload", 256, "message size in bytes")
	f.DurationVar(&o.Interval, "interval", 200*time.Microsecond, "time between two messages")
	f.IntVar(&o.Messages, "messages", 0, "messages to publish")
	f.StringVar(&o.Subject, "subject", "", "NATS subject")
	f.StringVar(&o.NATSURL, "nats", "", "NATS server URL (empty: embed one)")
	f.StringVar(&o.JobKeyFile, "job-key-file", "", "seal every message with a MAC under this key")
	return cmd
}

// newBenchBroadcastFollowerCmd returns the hidden `tpcoord bench
// broadcast-follower` that `bench broadcast` starts (fanout.RunFollower).
func newBenchBroadcastFollowerCmd() *cobra.Command {
	var o fanout.FollowerOptions
	cmd := &cobra.Command{
		Use:    "broadcast-follower",
		Short:  "Follower process of bench broadcast (internal)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return benchConfigError(err)
			}
			return fanout.RunFollower(cmd.Context(), cmd.OutOrStdout(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Transport, "transport", "", "nats or tcp")
	f.StringVar(&o.Addr, "addr", "", "NATS URL or TCP host:port of the publisher")
	f.StringVar(&o.Subject, "subject", "", "NATS subject")
	f.IntVar(&o.Messages, "messages", 0, "messages the publisher sends")
	f.DurationVar(&o.Deadline, "deadline", time.Minute, "give up and report after this long")
	f.StringVar(&o.JobKeyFile, "job-key-file", "", "verify every message's MAC under this key")
	return cmd
}
