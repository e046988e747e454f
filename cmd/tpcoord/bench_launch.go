//go:build !agentonly

package main

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/tpcoord/tpcoord/cmd/tpcoord/internal/bench/startup"
)

// newBenchLaunchCmd returns `tpcoord bench launch`.
func newBenchLaunchCmd() *cobra.Command {
	var o startup.Options
	var binary string
	cmd := &cobra.Command{
		Use:   "launch [-- launch flags]",
		Short: "Time from 'tpcoord launch --nproc N' to its ready file, with the CPU and page faults it took",
		Long: `For every --nproc N, --runs times (the sizes interleaved within each
round): starts 'tpcoord launch --nproc N' with launch's defaults (plus any
launch flags after --), looks for its ready file every 5 ms, and reports
the time from the start to the file: every rank has formed the world and
reported ready. At that moment it reads, from /proc, the CPU time (each
live thread's from schedstat, in nanoseconds, and reaped children's from
stat) and the minor page faults of launch and its ranks so far; then it
stops the job (SIGTERM) and waits for it before the next.

On a host of few cores the start of many ranks is CPU-bound: the CPU
figure, over the cores, is the floor of the time to ready.

The target, reported and never asserted: 64 ranks ready within 3 s on a
2-core machine (target_s, target_met on the nproc 64 line).

One JSON line per N with --json (each run's figures and the host's load
average before it included), a table otherwise; progress on stderr.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			if o.Self, err = benchSelf(); err != nil {
				return err
			}
			if binary != "" {
				o.Self = binary
			}
			o.Args = args
			if err := o.Validate(); err != nil {
				return benchConfigError(err)
			}
			return startup.Run(cmd.Context(), o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fs := cmd.Flags()
	fs.IntSliceVar(&o.NProc, "nproc", []int{16, 32, 64}, "world sizes, comma-separated")
	fs.IntVar(&o.Runs, "runs", 3, "jobs started per world size")
	fs.StringVar(&binary, "binary", "", "the tpcoord binary to launch (default: this one), to compare two builds")
	fs.BoolVar(&o.JSON, "json", false, "JSON lines instead of a table")
	fs.DurationVar(&o.Timeout, "timeout", 2*time.Minute, "give up on one job after this long")
	return cmd
}
