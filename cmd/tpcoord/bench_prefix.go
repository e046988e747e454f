//go:build !agentonly

package main

import (
	"errors"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tpcoord/tpcoord/cmd/tpcoord/internal/bench/prefix"
)

// newBenchPrefixCmd returns `tpcoord bench prefix`.
func newBenchPrefixCmd() *cobra.Command {
	var o prefix.Options
	cmd := &cobra.Command{
		Use:   "prefix",
		Short: "What rank 0's prefix cache saves: TTFT over a shared prefix, and the prefill of multi-turn chats, caching on vs off",
		Long: `Runs --rounds rounds, each of two jobs ('tpcoord launch' with a model
worker and a paged KV cache): one with prefix caching (the default) and one
with --enable-prefix-caching=false, the one with caching first in even
rounds and last in odd ones. Each job gets a warm-up request, then:

  ttft  --requests requests one after another (each sent when the last
        ended): a shared --prefix-tokens prefix and a --suffix-tokens
        suffix of its own, --max-tokens tokens, greedy. TTFT (send to
        first token, this client over NATS) of the first request, whose
        prefix is not cached yet, against the median of the others.
  chat  --chats conversations at once, --turns turns each: every turn
        resends the whole history (earlier messages and answers) with a
        new --turn-tokens message, answered with --answer-tokens tokens.
        Prefill tokens rank 0 computed (its status: prefix cache queries
        minus hits) and TTFT p50 and p99. --chats 0 skips it.

Prompts are pseudo-random token IDs, the same on both jobs of a round.
The summary pools the requests after the first over the rounds and
compares their TTFT median with caching against without: the target is
at most 0.2.

The default worker is 'tpcoord worker' (the synthetic model) with a pool
of --kv-blocks blocks and --forward-time per forward pass, which costs the
same however many tokens it feeds: its TTFTs say little. --worker-cmd runs
a real model instead (e.g. examples/torch-worker/worker.py --socket
{socket} --model DIR), and --vocab and --eos must be its checkpoint's.

One JSON line per workload and job and a summary line with --json, a
table otherwise; progress goes to stderr.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if o.Self, err = benchSelf(); err != nil {
				return err
			}
			if err := checkPrefixWorkerFlags(cmd.Flags(), o.WorkerCmd); err != nil {
				return benchConfigError(err)
			}
			if err := o.Validate(); err != nil {
				return benchConfigError(err)
			}
			return prefix.Run(cmd.Context(), o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	benchPrefixFlags(cmd.Flags(), &o)
	return cmd
}

// benchPrefixFlags defines bench prefix's flags on fs, filling o.
func benchPrefixFlags(fs *pflag.FlagSet, o *prefix.Options) {
	fs.IntVar(&o.NProc, "nproc", 2, "ranks (agent processes)")
	fs.StringVar(&o.WorkerCmd, "worker-cmd", "", "each rank's model worker command, as launch takes it ({socket}, {rank}); empty: tpcoord worker, the synthetic model")
	fs.IntVar(&o.KVBlocks, "kv-blocks", 1024, "the synthetic worker's KV pool, in blocks of 16 tokens (not with --worker-cmd: a real worker reports its own)")
	fs.DurationVar(&o.ForwardTime, "forward-time", 5*time.Millisecond, "the synthetic worker's forward pass wall time, whatever its tokens (not with --worker-cmd)")
	fs.IntVar(&o.Vocab, "vocab", 32000, "vocabulary size (the worker's model's)")
	fs.IntVar(&o.EOS, "eos", -1, "EOS token (the worker's model's; -1: none); requests ignore it")
	fs.IntVar(&o.PrefixTokens, "prefix-tokens", 2048, "ttft: the shared prefix's tokens")
	fs.IntVar(&o.SuffixTokens, "suffix-tokens", 32, "ttft: each request's own suffix's tokens")
	fs.IntVar(&o.Requests, "requests", 16, "ttft: requests in sequence (at least 2)")
	fs.IntVar(&o.MaxTokens, "max-tokens", 8, "ttft: output tokens per request")
	fs.IntVar(&o.Chats, "chats", 8, "chat: concurrent conversations (0: no chat workload)")
	fs.IntVar(&o.Turns, "turns", 6, "chat: turns per conversation")
	fs.IntVar(&o.TurnTokens, "turn-tokens", 128, "chat: tokens of each new user message")
	fs.IntVar(&o.AnswerTokens, "answer-tokens", 32, "chat: output tokens per turn (added to the history)")
	fs.IntVar(&o.Rounds, "rounds", 2, "rounds, each a job with caching and one without")
	fs.DurationVar(&o.ForwardTimeout, "forward-timeout", time.Minute, "deadline of one worker forward step")
	fs.BoolVar(&o.JSON, "json", false, "JSON lines instead of a table")
	fs.DurationVar(&o.Timeout, "timeout", 30*time.Minute, "give up after this long")
}

// checkPrefixWorkerFlags refuses the synthetic worker's flags with
// --worker-cmd.
func checkPrefixWorkerFlags(fs *pflag.FlagSet, workerCmd string) error {
	if workerCmd == "" {
		return nil
	}
	for _, name := range []string{"forward-time", "kv-blocks"} {
		if fs.Changed(name) {
			return errors.New("--" + name + ": the synthetic worker's; not with --worker-cmd")
		}
	}
	return nil
}
