//go:build !agentonly

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/broadcast/natsbus"
	"github.com/tpcoord/tpcoord/coordinator/agent"
	"github.com/tpcoord/tpcoord/internal/fielderr"
	"github.com/tpcoord/tpcoord/rank/client"
)

// clientConfig is what generate and status need to reach a job.
type clientConfig struct {
	Config  string
	NATS    string
	Auth    natsbus.Auth
	fields  fieldFlags
	Job     string
	Prefix  string
	Timeout time.Duration
	JSON    bool
}

func (c *clientConfig) flags(fs *pflag.FlagSet) {
	c.connFlags(fs)
	fs.BoolVar(&c.JSON, "json", false, "print JSON")
}

// connFlags are the flags that say how to reach a job.
func (c *clientConfig) connFlags(fs *pflag.FlagSet) {
	def := agent.DefaultConfig()
	c.fields = fieldFlags{}
	fs.StringVar(&c.Config, "config", "", "YAML config file; keys are flag names")
	fs.StringVar(&c.NATS, "nats", def.NATS, "NATS server URL (as written to launch's --ready-file)")
	natsAuthFlags(fs, &c.Auth, c.fields, "")
	fs.StringVar(&c.Job, c.fields.name("Job", "job"), def.Job, "job ID")
	fs.StringVar(&c.Prefix, c.fields.name("Prefix", "subject-prefix"), def.Prefix, "prefix of the job's NATS subjects")
}

// connect connects to the job's NATS server; log, if not nil, hears of the
// connection's losses and reconnections (a long-running client: serve).
func (c *clientConfig) connect(name string, log *slog.Logger) (*natsbus.Conn, broadcast.Subjects, error) {
	if err := broadcast.ValidateToken("Job", c.Job); err != nil {
		return nil, broadcast.Subjects{}, c.fields.configErr(err)
	}
	if err := broadcast.ValidateToken("Prefix", c.Prefix); err != nil {
		return nil, broadcast.Subjects{}, c.fields.configErr(err)
	}
	nc, err := natsbus.Connect(natsbus.Config{URL: c.NATS, Name: name, Auth: c.Auth, Logger: log})
	var fe *fielderr.Error
	if errors.As(err, &fe) {
		return nil, broadcast.Subjects{}, c.fields.configErr(err)
	}
	if err != nil {
		return nil, broadcast.Subjects{}, &hintError{err: err, hint: readyFileHint}
	}
	return nc, broadcast.Subjects{Prefix: c.Prefix, Job: c.Job}, nil
}

// readyFileHint is what a client that cannot reach a job is told.
const readyFileHint = "launch writes the job's ID and its clients' NATS URL to --ready-file (job, nats_url): pass them as --job and --nats"

// hintError is an error with a hint for the operator after it.
type hintError struct {
	err  error
	hint string
}

func (e *hintError) Error() string { return e.err.Error() + "\nhint: " + e.hint }
func (e *hintError) Unwrap() error { return e.err }

// unreachedJob adds readyFileHint to an error that says no rank of the
// job could be reached: nobody serves its subjects, the server refused to
// carry the request there, or nothing answered at all.
func unreachedJob(err error) error {
	if errors.Is(err, broadcast.ErrNoResponders) || errors.Is(err, broadcast.ErrRefused) || errors.Is(err, client.ErrNoAnswer) {
		return &hintError{err: err, hint: readyFileHint}
	}
	return err
}

// generateOptions are the generate command's flags.
type generateOptions struct {
	cc       clientConfig
	prompt   string
	req      api.GenerateRequest
	seed     int64
	logprobs int
	so       structuredFlags
	resume   time.Duration
}

// structuredFlags are generate's structured-output flags: at most one.
type structuredFlags struct {
	jsonSchema, grammarFile, regex string
	choices                        []string
	jsonObject                     bool
}

// constraint returns the structured outputs the flags ask for (nil for
// none), reading the schema or grammar file.
func (f *structuredFlags) constraint() (*api.StructuredOutputs, error) {
	so := &api.StructuredOutputs{Regex: f.regex, Choice: f.choices, JSONObject: f.jsonObject}
	if f.jsonSchema != "" {
		b, err := os.ReadFile(f.jsonSchema)
		if err != nil {
			return nil, configError("json-schema: %v", err)
		}
		so.JSON = b
	}
	if f.grammarFile != "" {
		b, err := os.ReadFile(f.grammarFile)
		if err != nil {
			return nil, configError("grammar: %v", err)
		}
		so.Grammar = string(b)
	}
	if !so.JSONObject && so.Regex == "" && so.Choice == nil && so.JSON == nil && so.Grammar == "" {
		return nil, nil
	}
	if err := so.Validate(); err != nil {
		return nil, configError("give one of --json-schema, --json-object, --regex, --choice and --grammar (%v)", err)
	}
	return so, nil
}

func newGenerateCmd() *cobra.Command {
	var o generateOptions
	cmd := &cobra.Command{
		Use:   "generate --prompt 1,2,3 --max-tokens N",
		Short: "Submit one request to a job and print its tokens as they stream in",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := layerConfig(cmd.Flags()); err != nil {
				return err
			}
			return runGenerate(cmd.Context(), &o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fs := cmd.Flags()
	o.cc.flags(fs)
	req := &o.req
	fs.DurationVar(&o.cc.Timeout, "timeout", 5*time.Minute, "give up after this long")
	fs.StringVar(&o.prompt, "prompt", "", "prompt token IDs, comma-separated")
	fs.IntVar(&req.MaxTokens, "max-tokens", 16, "most tokens to generate")
	fs.Int64Var(&o.seed, "seed", -1, "per-request sampling seed (-1 for none)")
	fs.Float32Var(&req.Temperature, "temperature", 1, "sampling temperature (below 1e-5: greedy)")
	fs.IntVar(&req.TopK, "top-k", 0, "top-k (0 disables)")
	fs.Float32Var(&req.TopP, "top-p", 0, "top-p (0 or 1 disables)")
	fs.Float32Var(&req.MinP, "min-p", 0, "min-p (0 disables)")
	fs.IntVar(&req.MinTokens, "min-tokens", 0, "stop tokens and EOS are blocked until this many tokens")
	fs.BoolVar(&req.IgnoreEOS, "ignore-eos", false, "do not stop at EOS")
	fs.IntVar(&o.logprobs, "logprobs", -1, "return each token's logprob and the top N (0..20; -1: none)")
	fs.DurationVar(&o.resume, "resume-window", client.DefaultResumeWindow, "how long the request is resubmitted, continuing from the tokens it has, while no rank 0 answers (gone, restarting, re-forming) before it fails (0: never)")
	fs.StringVar(&o.so.jsonSchema, "json-schema", "", "structured output: a file holding a JSON Schema the output must be valid against")
	fs.BoolVar(&o.so.jsonObject, "json-object", false, "structured output: any JSON object")
	fs.StringVar(&o.so.regex, "regex", "", "structured output: a regular expression (RE2) the whole output must match")
	fs.StringSliceVar(&o.so.choices, "choice", nil, "structured output: the output is exactly one of these strings (repeat the flag, or comma-separate)")
	fs.StringVar(&o.so.grammarFile, "grammar", "", "structured output: a file holding a GBNF grammar (root rule root)")
	return cmd
}

// runGenerate submits the request and prints its tokens as they stream in;
// SIGINT/SIGTERM or the timeout cancel it at rank 0.
func runGenerate(ctx context.Context, o *generateOptions, out, errOut io.Writer) error {
	ids, err := parseTokens(o.prompt)
	if err != nil {
		return configError("prompt: %w", err)
	}
	req := o.req
	req.PromptTokenIDs = ids
	if req.StructuredOutputs, err = o.so.constraint(); err != nil {
		return err
	}
	if o.logprobs >= 0 {
		req.Logprobs = &o.logprobs
	}
	if o.seed >= 0 {
		s := uint64(o.seed)
		req.Seed = &s
	}
	nc, subj, err := o.cc.connect("tpcoord-generate", nil)
	if err != nil {
		return err
	}
	defer nc.Close()
	sctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	// --timeout bounds it all: the request ends a grace period before,
	// which it may spend waiting for rank 0's cancelled reply.
	grace := min(client.DefaultCancelGrace, o.cc.Timeout/10)
	ctx, cancel := context.WithTimeout(client.WithCancelGrace(sctx, grace), o.cc.Timeout-grace)
	defer cancel()
	ctx = client.WithResumeWindow(ctx, o.resume)
	noticed := false
	ctx = client.WithResumeNotice(ctx, func(err error, tokens int) {
		if !noticed { // once: the wait goes on until --timeout or --resume-window
			noticed = true
			fmt.Fprintf(errOut, "tpcoord: %v; resubmitting from %d tokens until --timeout or --resume-window passes\n", err, tokens)
		}
	})
	rep, err := client.Generate(ctx, nc, subj, &req, func(_ int, tok int32) {
		if !o.cc.JSON {
			fmt.Fprintf(out, "%d ", tok)
		}
	})
	if rep != nil && rep.FinishReason == api.FinishCancelled && o.cc.JSON {
		_ = json.NewEncoder(out).Encode(struct {
			Tokens       []int32 `json:"tokens"`
			FinishReason string  `json:"finish_reason"`
		}{rep.Tokens, rep.FinishReason})
	}
	if err != nil {
		return unreachedJob(err)
	}
	if o.cc.JSON {
		return json.NewEncoder(out).Encode(struct {
			Tokens       []int32        `json:"tokens"`
			FinishReason string         `json:"finish_reason"`
			Timings      *api.Timings   `json:"timings,omitempty"`
			Logprobs     []api.Logprobs `json:"logprobs,omitempty"`
		}{rep.Tokens, rep.FinishReason, rep.Timings, rep.TokenLogprobs})
	}
	fmt.Fprintf(out, "\nfinish_reason=%s tokens=%d\n", rep.FinishReason, len(rep.Tokens))
	return nil
}

func parseTokens(s string) ([]int32, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("no token IDs given")
	}
	parts := strings.Split(s, ",")
	out := make([]int32, len(parts))
	for i, p := range parts {
		v, err := strconv.ParseInt(strings.TrimSpace(p), 10, 32)
		if err != nil {
			return nil, fmt.Errorf("token %d: %q is not an integer token ID", i, p)
		}
		out[i] = int32(v)
	}
	return out, nil
}

func newStatusCmd() *cobra.Command {
	var (
		cc   clientConfig
		wait time.Duration
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show every rank's state, last applied step and digest",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := layerConfig(cmd.Flags()); err != nil {
				return err
			}
			nc, subj, err := cc.connect("tpcoord-status", nil)
			if err != nil {
				return err
			}
			defer nc.Close()
			ranks, err := client.CollectStatus(cmd.Context(), nc, subj, wait)
			if err != nil {
				return unreachedJob(err)
			}
			if len(ranks) == 0 {
				return &hintError{err: fmt.Errorf("no rank of job %q answered within %v", cc.Job, wait), hint: readyFileHint}
			}
			out := cmd.OutOrStdout()
			if cc.JSON {
				if ranks == nil {
					ranks = []api.RankStatus{}
				}
				return json.NewEncoder(out).Encode(struct {
					Ranks []api.RankStatus `json:"ranks"`
				}{ranks})
			}
			printStatus(out, ranks)
			return nil
		},
	}
	cc.flags(cmd.Flags())
	cmd.Flags().DurationVar(&wait, "wait", 2*time.Second, "how long to wait for all ranks to answer")
	return cmd
}

// printStatus prints one line per rank, with what looks wrong with it.
func printStatus(w io.Writer, ranks []api.RankStatus) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RANK\tSTATE\tPHASE\tEPOCH\tSTEP\tDIGEST\tROWS\tWAITING\tHEARTBEAT\tNOTE")
	for _, v := range client.Diagnose(ranks, agent.MaxWorldSize) {
		hb := "-"
		if v.HeartbeatAgeMs >= 0 {
			hb = fmt.Sprintf("%.0fms ago", v.HeartbeatAgeMs)
		}
		r := v.Status
		if r == nil {
			fmt.Fprintf(tw, "%d\t-\t\t\t\t\t\t\t%s\t%s\n", v.Rank, hb, v.Note)
			continue
		}
		phase := "-" // older ranks report no phase
		if r.Phase != "" {
			phase = r.Phase + " " + client.PhaseTime(r.PhaseMs)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%s\t%d\t%d\t%s\t%s\n", r.Rank, r.State, phase, r.Epoch, r.Step, r.Digest, r.Rows, r.Waiting, hb, v.Note)
	}
	tw.Flush()
	for _, r := range ranks {
		printNoise(w, &r)
		printKV(w, &r)
	}
}

// printKV prints the KV cache rank 0 schedules, if it reports one, and
// its prefix cache's hit rate once it has looked anything up.
func printKV(w io.Writer, r *api.RankStatus) {
	kv := r.KV
	if kv == nil || kv.Blocks == 0 {
		return
	}
	fmt.Fprintf(w, "rank %d kv cache: %d of %d blocks used (%.1f%%), %d tokens a block; %d preempted this epoch",
		r.Rank, kv.Used, kv.Blocks, 100*float64(kv.Used)/float64(kv.Blocks), kv.BlockSize, kv.Preemptions)
	if q := kv.PrefixCacheQueries; q > 0 {
		fmt.Fprintf(w, "; prefix cache: %d of %d tokens hit (%.1f%%)", kv.PrefixCacheHits, q, 100*float64(kv.PrefixCacheHits)/float64(q))
	}
	fmt.Fprintln(w)
}

// printNoise prints a sampling rank's noise pool, if it reports one:
// whether its producers keep up (rows made inline sit on the step's
// critical path).
func printNoise(w io.Writer, r *api.RankStatus) {
	n := client.NoiseOf(r.Sampler)
	if n == nil {
		return
	}
	producers := fmt.Sprintf("%d producers", n.Producers)
	if n.Producers == 1 {
		producers = "1 producer"
	}
	fmt.Fprintf(w, "rank %d noise pool: %s rows, %s; %d rows taken, %d made inline (%d of them for want of a free slot), %d ready\n",
		r.Rank, n.Form, producers, n.Taken, n.Inline, n.NoSlot, n.Ready)
}
