//go:build !agentonly

package main

import (
	"github.com/spf13/cobra"

	"github.com/tpcoord/tpcoord/cmd/tpcoord/internal/bench/sampler"
)

// newBenchSamplerCmd returns `tpcoord bench sampler`: time one Sample call
// over a batch of LLM-like rows (sampler.SyntheticLogits) for every
// combination of the listed cases. Each list flag takes comma-separated
// values.
func newBenchSamplerCmd() *cobra.Command {
	var o sampler.Options
	cmd := &cobra.Command{
		Use:   "sampler",
		Short: "Time the sampler (fast or reference) on synthetic logits",
		Long: `Times Sampler.Sample (or the Reference) on a batch of synthetic LLM-like
logits rows, one thread, and prints one line per case with the median and
p90 time of a call. Pool noise (exact rows, or with --noise bound the
bound rows that portable builds' pools hand out) is pre-filled outside the
timing, as a warm noise pool would provide it; inline noise is computed by
the sampler. The modes of one vocab, batch, implementation and noise source
are timed interleaved (a call of each in turn, over the same logits), so
that their ratios, plain against greedy for one, are not moved by the
machine's drift from one case to the next.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return benchConfigError(err)
			}
			return sampler.Run(cmd.Context(), o, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.IntSliceVar(&o.Vocab, "vocab", []int{100352}, "vocabulary sizes")
	f.IntSliceVar(&o.Batch, "batch", []int{32}, "batch sizes")
	f.StringSliceVar(&o.Modes, "mode", []string{"plain"}, "modes: plain, topk, topp, topk_topp, minp, greedy")
	f.StringSliceVar(&o.Impls, "impl", []string{"fast"}, "implementations: fast, reference")
	f.StringSliceVar(&o.Noises, "noise", []string{"pool"}, "noise source of the fast sampler: pool (exact pool rows), bound (bound pool rows, --noise-form bound), inline")
	f.IntVar(&o.Iters, "iters", 30, "timed calls per case")
	f.BoolVar(&o.JSON, "json", false, "print one JSON object per line")
	return cmd
}
