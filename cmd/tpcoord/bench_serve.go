//go:build !agentonly

package main

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/tpcoord/tpcoord/cmd/tpcoord/internal/bench/serve"
)

// newBenchServeCmd returns `tpcoord bench serve`.
func newBenchServeCmd() *cobra.Command {
	var o serve.Options
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "The HTTP gateway's cost: streaming clients over HTTP vs the same requests straight over NATS",
		Long: `Runs 'tpcoord launch' (synthetic executor) and serves its OpenAI-compatible
API on loopback: with --gateway launch (the default) from launch's process
(launch --http), with --gateway in-process from this process (the gateway
of 'tpcoord serve', on a NATS connection of its own). After a warm-up, it runs --rounds rounds of each
path, alternating HTTP, NATS, HTTP, ...: --clients concurrent clients, each
sending its next request when the last ended, --requests requests per round
or for --duration. HTTP streams /v1/completions (token-ID prompts, SSE)
with --http-client: raw, HTTP/1.1 written and read on each client's own
goroutine, or net/http, Go's client (a write loop and a read loop per
connection); NATS sends the same requests with rank/client.Mux.Stream. Every request has max_tokens --max-tokens, ignore_eos,
temperature 0.8 and a fixed seed; request i of a round is the same on both
paths.

Per round: TTFT (send to first token) and ITL (gaps between tokens) p50 and
p99, and output tokens/s over the round's wall time. The summary takes
medians over rounds and compares HTTP with NATS against the target: at
least 0.95 of the tokens/s and at most 1 ms more TTFT p50.

One JSON line per round and a summary line with --json, a table otherwise
(scripts/benchplot draws the JSON lines, as serve.jsonl); progress goes to
stderr.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if o.Self, err = benchSelf(); err != nil {
				return err
			}
			if cmd.Flags().Changed("requests") && !cmd.Flags().Changed("duration") {
				o.Duration = 0 // --requests replaces the default window
			}
			if err := o.Validate(); err != nil {
				return benchConfigError(err)
			}
			return serve.Run(cmd.Context(), o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fs := cmd.Flags()
	fs.IntVar(&o.NProc, "nproc", 2, "ranks (agent processes)")
	fs.IntVar(&o.Clients, "clients", 32, "concurrent streaming clients (and --max-batch)")
	fs.IntVar(&o.Rounds, "rounds", 4, "rounds per path, alternating HTTP and NATS")
	fs.IntVar(&o.Requests, "requests", 0, "requests per round (give this or --duration)")
	fs.DurationVar(&o.Duration, "duration", 10*time.Second, "per round: clients send new requests for this long (--requests replaces it)")
	fs.IntVar(&o.MaxTokens, "max-tokens", 64, "output tokens per request (ignore_eos)")
	fs.IntVar(&o.Vocab, "vocab", 100352, "vocabulary size")
	fs.DurationVar(&o.ForwardTime, "forward-time", 20*time.Millisecond, "synthetic forward pass wall time")
	fs.StringVar(&o.Gateway, "gateway", serve.GatewayLaunch, "where the gateway runs: launch (in the job's launch process, launch --http: apart from the clients, as deployed) or in-process (in this bench's process, beside the clients)")
	fs.StringVar(&o.HTTPClient, "http-client", serve.HTTPClientRaw, "the HTTP path's client: raw (HTTP/1.1 on the client's goroutine, no goroutine hand-offs of its own) or net/http (Go's client)")
	fs.DurationVar(&o.Think, "think", 40*time.Millisecond, "most a client waits before its next request (a draw fixed by the request, the same on both paths): spreads submissions over the step")
	fs.BoolVar(&o.JSON, "json", false, "JSON lines instead of a table")
	fs.StringVar(&o.CPUProfile, "cpuprofile", "", "write this process's CPU profile (gateway and clients) over the rounds to this file")
	fs.DurationVar(&o.Timeout, "timeout", 30*time.Minute, "give up after this long")
	return cmd
}
