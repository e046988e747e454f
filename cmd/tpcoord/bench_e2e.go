//go:build !agentonly

package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tpcoord/tpcoord/cmd/tpcoord/internal/bench/e2e"
)

// newBenchE2ECmd returns `tpcoord bench e2e`.
func newBenchE2ECmd() *cobra.Command {
	var o e2e.Options
	cmd := &cobra.Command{
		Use:   "e2e",
		Short: "Output tokens/s of a real local cluster for each combination of the three sampling optimisations",
		Long: `Runs 'tpcoord launch' once per combination of --noise sync|pool,
--sampling softmax|logspace and --sampling-ranks all|rank0, submits a warm-up
batch of --batch requests of 2 tokens, then --batch concurrent requests of
--tokens output tokens each (ignore_eos, temperature 0.8, fixed seeds) and
reports the output tokens/s over the whole batch, with the ratio to the
baseline (sync+softmax+all) measured in the same run, then each stage's own
contribution. Each line also carries rank 0's step time per phase, median
and mean, from its flight recorder.

--cpus runs the whole launch (NATS server, every rank, noise producers)
under 'taskset -c', so every combination gets the same CPU budget.
GOMAXPROCS is left alone: the Go runtime of each process sizes itself from
the affinity mask it starts with.

One JSON line per combination and per stage with --json, a table otherwise;
progress goes to stderr.

--executor worker runs a real model instead: --worker-cmd starts each
rank's model worker (e.g. examples/torch-worker), and --vocab and --eos
must be the checkpoint's. --forward-time is the synthetic executor's and
is refused then; the lines carry "executor":"worker" and rank 0's step
breakdown (await, publish, forward, sample, reply). --temperature 0 runs
greedy, and --tokens-out appends each request's tokens to a file (JSON
lines), to compare runs.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if o.Self, err = benchSelf(); err != nil {
				return err
			}
			if err := checkE2EExecutorFlags(cmd.Flags(), o.Executor); err != nil {
				return benchConfigError(err)
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
	fs.StringVar(&o.Executor, "executor", e2e.SyntheticExecutor, "synthetic, or worker: a real model (--worker-cmd, --eos)")
	fs.StringVar(&o.Model.WorkerCmd, "worker-cmd", "", "with --executor worker: each rank's model worker command, as launch takes it ({socket}, {rank})")
	fs.IntVar(&o.Model.EOS, "eos", -1, "with --executor worker: the checkpoint's EOS token (-1: none)")
	fs.DurationVar(&o.Model.ForwardTimeout, "forward-timeout", 30*time.Second, "with --executor worker: deadline of one forward step")
	fs.Float32Var(&o.Temperature, "temperature", 0.8, "sampling temperature of every request (0: greedy)")
	fs.StringVar(&o.TokensOut, "tokens-out", "", "append each measured request's output tokens to this file (JSON lines)")
	return cmd
}

// checkE2EExecutorFlags refuses the flags given that the executor does not
// use: --forward-time with the worker, the worker's with the synthetic one.
func checkE2EExecutorFlags(fs *pflag.FlagSet, executor string) error {
	if executor == e2e.WorkerExecutor {
		if fs.Changed("forward-time") {
			return errors.New("--forward-time: the synthetic executor's; with --executor worker the model's forward pass takes what it takes")
		}
		return nil
	}
	for _, name := range []string{"worker-cmd", "eos", "forward-timeout"} {
		if fs.Changed(name) {
			return fmt.Errorf("--%s: only with --executor worker", name)
		}
	}
	return nil
}
