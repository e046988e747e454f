package main

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/tpcoord/tpcoord/internal/bench/e2e"
)

// newBenchE2ECmd returns `tpcoord bench e2e`.
func newBenchE2ECmd() *cobra.Command {
	var o e2e.Options
	cmd := &cobra.Command{
		Use:   "e2e",
		Short: "Output tokens/s of a real local cluster for each combination of the three sampling optimisations",
		Long: `Runs 'tpcoord launch' once per combination of --noise sync|pool,
--sampling softmax|logspace and --sampling-ranks all|rank0, submits --batch
concurrent requests of --tokens output tokens each (ignore_eos, temperature
0.8, fixed seeds) and reports the output tokens/s over the whole batch, with
the ratio to the baseline (sync+softmax+all) measured in the same run, then
each stage's own contribution.

--cpus runs the whole launch (NATS server, every rank, noise producers)
under 'taskset -c', so every combination gets the same CPU budget.
GOMAXPROCS is left alone: the Go runtime of each process sizes itself from
the affinity mask it starts with.

One JSON line per combination and per stage with --json, a table otherwise;
progress goes to stderr.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if o.Self, err = benchSelf(); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return benchConfigError(err)
			}
			return e2e.Run(cmd.Context(), o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fs := cmd.Flags()
	fs.IntVar(&o.NProc, "nproc", 4, "ranks (agent processes)")
	fs.IntVar(&o.Batch, "batch", 32, "concurrent requests (and --max-batch)")
	fs.IntVar(&o.Vocab, "vocab", 100352, "vocabulary size")
	fs.DurationVar(&o.ForwardTime, "forward-time", 20*time.Millisecond, "synthetic forward pass wall time")
	fs.IntVar(&o.Tokens, "tokens", 64, "output tokens per request (max_tokens, ignore_eos)")
	fs.StringVar(&o.CPUs, "cpus", "", "run each launch under taskset -c CPUS (e.g. 0-1); empty: no pinning")
	fs.StringSliceVar(&o.Combos, "combos", []string{"all"}, "combinations noise+sampling+ranks (e.g. sync+softmax+all,pool+logspace+rank0), or all")
	fs.BoolVar(&o.JSON, "json", false, "JSON lines instead of a table")
	fs.DurationVar(&o.Timeout, "timeout", 10*time.Minute, "give up on one combination after this long")
	return cmd
}
