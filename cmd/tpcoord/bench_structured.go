//go:build !agentonly

package main

import (
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tpcoord/tpcoord/cmd/tpcoord/internal/bench/structured"
)

// newBenchStructuredCmd returns `tpcoord bench structured`.
func newBenchStructuredCmd() *cobra.Command {
	var o structured.Options
	cmd := &cobra.Command{
		Use:   "structured",
		Short: "What grammar-constrained sampling costs: tokens/s of a batch constrained by a nested JSON Schema against unconstrained",
		Long: `Starts one job ('tpcoord launch', synthetic executor, --tokenizer on rank
0), then runs --rounds rounds of two batches of --batch concurrent
requests, unconstrained first in even rounds and last in odd ones:

  unconstrained  ignore_eos, temperature 0.8, fixed seeds, max_tokens
                 --tokens;
  constrained    every request constrained by a nested JSON Schema
                 (structured_outputs.json: the built-in order schema, or
                 --schema FILE), temperature 0.8, fixed seeds, the same
                 max_tokens, EOS where the grammar may end.

Before the rounds, an unconstrained batch of 2 tokens and a constrained
batch of --tokens warm the job up (the second compiles the schema and
fills rank 0's mask cache); the constrained warm-up gets a line of its
own. A constrained output may end early, at its grammar's end: tokens/s is
counted over the tokens each batch produced, and lines say how many
requests stopped and how many of those decode to JSON.

Each batch line carries rank 0's step phases over the batch's steps
(median and mean, from its flight recorder): masks are made while the
forward pass runs, and any wait for them shows in the sample phase. The
summary gives each kind's median tokens/s and the median over rounds of
constrained/unconstrained: the target is at least 0.95.

One JSON line per batch and per round and a summary line with --json, a
table otherwise; progress goes to stderr.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if o.Self, err = benchSelf(); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return benchConfigError(err)
			}
			return structured.Run(cmd.Context(), o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	benchStructuredFlags(cmd.Flags(), &o)
	return cmd
}

// benchStructuredFlags defines bench structured's flags on fs, filling o.
func benchStructuredFlags(fs *pflag.FlagSet, o *structured.Options) {
	fs.IntVar(&o.NProc, "nproc", 4, "ranks (agent processes): the tensor-parallel degree")
	fs.IntVar(&o.Batch, "batch", 32, "concurrent requests in each batch (and --max-batch)")
	fs.IntVar(&o.Vocab, "vocab", 100352, "vocabulary size (at least the tokenizer's)")
	fs.DurationVar(&o.ForwardTime, "forward-time", 20*time.Millisecond, "synthetic forward pass wall time")
	fs.IntVar(&o.Tokens, "tokens", 64, "max_tokens of every request")
	fs.StringVar(&o.Tokenizer, "tokenizer", "tiktoken:cl100k_base", "rank 0's tokenizer (as launch takes it), whose vocabulary the grammar is compiled over")
	fs.IntVar(&o.EOS, "eos", 100257, "the tokenizer's end-of-sequence token (cl100k_base's <|endoftext|>)")
	fs.StringVar(&o.Schema, "schema", "", "JSON Schema file the constrained batch follows (empty: the built-in nested order schema)")
	fs.IntVar(&o.Rounds, "rounds", 5, "rounds, each an unconstrained and a constrained batch")
	fs.BoolVar(&o.JSON, "json", false, "JSON lines instead of a table")
	fs.DurationVar(&o.Timeout, "timeout", 30*time.Minute, "give up after this long")
}
