//go:build !agentonly

package main

import (
	"github.com/spf13/cobra"

	"github.com/tpcoord/tpcoord/cmd/tpcoord/internal/bench/noise"
)

// newBenchNoiseCmd returns `tpcoord bench noise`.
func newBenchNoiseCmd() *cobra.Command {
	var o noise.Options
	cmd := &cobra.Command{
		Use:   "noise",
		Short: "Time Gumbel noise generation (noisepool.FillRow, scalar Go, math.Log) and warm-pool takes",
		Long: `Times, in one run:

  fillrow      noisepool.FillRow (the AVX-512 kernel where the CPU has it,
               else the portable block kernel) with P goroutines at once,
               for every P of --producers;
  scalar_go    the exported scalar path GumbelFromBits(Bits(seed, i)), one
               goroutine (the portable block kernel is not exported);
  mathlog      the naive baseline -log(-log(u)) with math.Log on the same
               bits, one goroutine;
  pool_take32  taking 32 rows (one per stream) from a warm noisepool.Pool,
               then releasing them (not timed) and waiting for the
               producers to refill (not timed).

Value cases report ns per value per core (an iteration's wall time × P /
values) with median, p90 and p99 over --iters iterations of --rows rows per
goroutine. One JSON line per case with --json, a table otherwise; progress
on stderr.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return benchConfigError(err)
			}
			return noise.Run(cmd.Context(), o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Vocab, "vocab", 100352, "values per row")
	f.IntVar(&o.Rows, "rows", 64, "rows per goroutine and iteration")
	f.IntSliceVar(&o.Producers, "producers", []int{1, 2}, "goroutine counts for fillrow, comma-separated")
	f.IntVar(&o.Iters, "iters", 20, "timed iterations per case")
	f.BoolVar(&o.JSON, "json", false, "print one JSON object per line")
	return cmd
}
