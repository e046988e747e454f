//go:build !agentonly

package main

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/tpcoord/tpcoord/cmd/tpcoord/internal/bench/step"
)

// newBenchStepCmd returns `tpcoord bench step`.
func newBenchStepCmd() *cobra.Command {
	var o step.Options
	cmd := &cobra.Command{
		Use:   "step",
		Short: "Coordinator overhead per step of a real local cluster vs the raw TCP fan-out floor",
		Long: `For every --nproc N: runs 'tpcoord launch' with a zero-cost forward
(--forward-time 0), submits --batch concurrent greedy requests of --tokens
output tokens (ignore_eos), then has rank 0 dump its flight recorder
(SIGUSR1, --flight-dir) and reads every step of the batch from it.
Overhead per step is rank 0's step wall time minus its forward and sample
phases (await, publish, reply and the gaps between them); the bench reports
its p50/p90/p99 and the median of each phase. Rank 0 writes its step
message on a sender goroutine, which the synthetic forward pass lets run:
the write falls in the forward phase, so read the step's wall time
(step_p50_us) beside the overhead.

In the same run it measures the raw TCP fan-out floor to N−1 follower
processes (the machinery of 'bench broadcast') and reports overhead p50 over
floor p50 against the target: at most 1.5 at TP 8.

One JSON line per N with --json, a table otherwise; progress on stderr.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if o.Self, err = benchSelf(); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return benchConfigError(err)
			}
			return step.Run(cmd.Context(), o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fs := cmd.Flags()
	fs.IntSliceVar(&o.NProc, "nproc", []int{2, 4, 8}, "world sizes, comma-separated")
	fs.IntVar(&o.Batch, "batch", 32, "concurrent requests (and --max-batch)")
	fs.IntVar(&o.Vocab, "vocab", 4096, "vocabulary size")
	fs.IntVar(&o.Tokens, "tokens", 64, "output tokens per request (max_tokens, ignore_eos)")
	fs.DurationVar(&o.ForwardTime, "forward-time", 0, "synthetic forward pass wall time")
	fs.IntVar(&o.FloorPayload, "floor-payload", 256, "floor: message size in bytes")
	fs.DurationVar(&o.FloorInterval, "floor-interval", 200*time.Microsecond, "floor: time between two messages")
	fs.IntVar(&o.FloorMessages, "floor-messages", 2000, "floor: messages per N (the first 5% are warm-up)")
	fs.BoolVar(&o.JSON, "json", false, "JSON lines instead of a table")
	fs.DurationVar(&o.Timeout, "timeout", 5*time.Minute, "give up on one cluster after this long")
	return cmd
}
