package serve

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/tpcoord/tpcoord/broadcast/natsbus"
	"github.com/tpcoord/tpcoord/cmd/tpcoord/internal/bench/job"
	"github.com/tpcoord/tpcoord/cmd/tpcoord/internal/bench/stats"
	"github.com/tpcoord/tpcoord/coordinator/gateway"
	"github.com/tpcoord/tpcoord/rank/client"
)

// model is the name the bench's gateway serves.
const model = "tpcoord-bench"

// Run starts the job and the gateway, runs o.Rounds rounds of each path,
// alternating (HTTP first), and writes one line per round and then the
// summary to stdout, a table or JSON lines, with progress on progress.
func Run(ctx context.Context, o Options, stdout, progress io.Writer) error {
	if err := o.Validate(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	dir, err := os.MkdirTemp("", "tpcoord-bench-serve-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	s := Summary{Kind: "summary", Machine: stats.ThisMachine(), Setup: o.setup(), LoadBefore: stats.LoadAvg()}
	fmt.Fprintf(progress, "bench serve: load average %s; starting a job of %d ranks\n", s.LoadBefore, o.NProc)
	args := []string{
		"--nproc", strconv.Itoa(o.NProc), "--job", "bench-serve", "--vocab", strconv.Itoa(o.Vocab),
		"--forward-time", o.ForwardTime.String(), "--max-batch", strconv.Itoa(o.Clients),
		"--noise-pool-rows", strconv.Itoa(max(128, 3*o.Clients))}
	if o.Gateway == GatewayLaunch {
		args = append(args, "--http", "127.0.0.1:0", "--served-model-name", model)
	}
	j, err := job.Start(ctx, job.Launch{Self: o.Self, Dir: dir, Name: "serve", Args: args})
	if err != nil {
		return err
	}
	var rounds []RoundResult
	if o.Gateway == GatewayLaunch {
		rounds, err = runPaths(ctx, j, j.Ready().HTTPURL, o, stdout, progress)
	} else {
		rounds, err = withGateway(ctx, j, o, stdout, progress)
	}
	if err != nil {
		return j.Fail(err)
	}
	j.StopQuietly(progress, "bench serve")
	s.LoadAfter = stats.LoadAvg()
	compare(&s, rounds)
	return printSummary(stdout, s, o.JSON)
}

func (o Options) setup() Setup {
	return Setup{NProc: o.NProc, Clients: o.Clients, Requests: o.Requests, DurationS: o.Duration.Seconds(),
		MaxTokens: o.MaxTokens, Vocab: o.Vocab, ForwardTimeMS: ms(o.ForwardTime), ThinkMS: ms(o.Think), Gateway: o.Gateway, HTTPClient: o.HTTPClient}
}

// runPaths runs the rounds on the two ways to the job: HTTP through the
// gateway at url, and NATS straight to rank 0.
func runPaths(ctx context.Context, j *job.Job, url string, o Options, stdout, progress io.Writer) ([]RoundResult, error) {
	mux, err := client.NewMux(ctx, j.Bus())
	if err != nil {
		return nil, err
	}
	defer mux.Close()
	var web sender = newHTTPSender(url, model, o.Clients)
	if o.HTTPClient == HTTPClientRaw {
		raw, err := newRawSender(url, model, o.Clients)
		if err != nil {
			return nil, err
		}
		defer raw.close()
		web = raw
	}
	paths := []sender{web, &natsSender{mux: mux, subj: j.Subjects()}}
	return runRounds(ctx, paths, o, stdout, progress)
}

// withGateway serves the job's API on loopback from this process, over a
// NATS connection of its own as `tpcoord serve` has, runs the rounds and
// stops the gateway.
func withGateway(ctx context.Context, j *job.Job, o Options, stdout, progress io.Writer) ([]RoundResult, error) {
	nc, err := natsbus.Connect(natsbus.Config{URL: j.Ready().NATSURL, Name: "tpcoord-bench-gateway"})
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	defer nc.Close()
	cfg := gateway.DefaultConfig()
	cfg.Listen, cfg.Model = "127.0.0.1:0", model
	gw, err := gateway.New(cfg, nc, j.Subjects())
	if err != nil {
		return nil, err
	}
	ln, err := gateway.Listen(cfg)
	if err != nil {
		return nil, err
	}
	gctx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- gw.Serve(gctx, ln) }() // owned here: stopped and awaited below
	rounds, err := runPaths(ctx, j, gateway.URL(cfg, ln), o, stdout, progress)
	stop()
	if serr := <-served; serr != nil && err == nil {
		err = serr
	}
	return rounds, err
}

// runRounds warms both paths up (every client's connection, the job's
// first steps), then runs the rounds, alternating the paths.
func runRounds(ctx context.Context, paths []sender, o Options, stdout, progress io.Writer) ([]RoundResult, error) {
	warm := load{requests: o.Clients, maxTokens: 2, vocab: o.Vocab, seed: warmSeed}
	for _, p := range paths {
		if _, err := runRound(ctx, p, o.Clients, warm); err != nil {
			return nil, fmt.Errorf("warm-up: %w", err)
		}
	}
	if !o.JSON {
		printHeader(stdout, o)
	}
	l := load{requests: o.Requests, window: o.Duration, maxTokens: o.MaxTokens, vocab: o.Vocab, seed: seedBase, think: o.Think}
	stopProfile, err := startProfile(o.CPUProfile)
	if err != nil {
		return nil, err
	}
	defer stopProfile()
	var out []RoundResult
	for r := range o.Rounds {
		l.round = r
		for _, p := range paths {
			rs, err := runRound(ctx, p, o.Clients, l)
			if err != nil {
				return nil, fmt.Errorf("round %d: %w", r, err)
			}
			res := summarize(p.name(), r, rs)
			fmt.Fprintf(progress, "bench serve: round %d %s: %.1f tokens/s\n", r, p.name(), res.TokensPerS)
			if err := printRound(stdout, res, o.JSON); err != nil {
				return nil, err
			}
			out = append(out, res)
		}
	}
	return out, nil
}

func printHeader(w io.Writer, o Options) {
	load := fmt.Sprintf("%d requests", o.Requests)
	if o.Duration > 0 {
		load = fmt.Sprintf("%v of submissions", o.Duration)
	}
	fmt.Fprintf(w, "nproc %d, %d clients, %s per round, max_tokens %d, vocab %d, forward %v, think < %v\n",
		o.NProc, o.Clients, load, o.MaxTokens, o.Vocab, o.ForwardTime, o.Think)
	fmt.Fprintf(w, "%-5s %-5s %9s %8s %14s %9s %9s %9s %9s\n", "round", "path", "requests", "tokens", "output_tok/s", "ttft_p50", "ttft_p99", "itl_p50", "itl_p99")
}

func printRound(w io.Writer, r RoundResult, asJSON bool) error {
	if asJSON {
		return stats.WriteJSONLine(w, r)
	}
	_, err := fmt.Fprintf(w, "%-5d %-5s %9d %8d %14.1f %9.2f %9.2f %9.2f %9.2f\n", r.Round, r.Path, r.Requests,
		r.OutputTokens, r.TokensPerS, r.TTFTP50MS, r.TTFTP99MS, r.ITLP50MS, r.ITLP99MS)
	return err
}

func printSummary(w io.Writer, s Summary, asJSON bool) error {
	if asJSON {
		return stats.WriteJSONLine(w, s)
	}
	for _, p := range []struct {
		name string
		s    PathSummary
	}{{"http", s.HTTP}, {"nats", s.NATS}} {
		fmt.Fprintf(w, "median %-5s %8s %14.1f %9.2f %9.2f %9.2f %9.2f\n", p.name, "", p.s.TokensPerS, p.s.TTFTP50MS, p.s.TTFTP99MS, p.s.ITLP50MS, p.s.ITLP99MS)
	}
	met := "met"
	if !s.TargetMet {
		met = "NOT met"
	}
	fmt.Fprintf(w, "all requests: TTFT p50 http %.2f ms, nats %.2f ms\n", s.HTTP.TTFTP50AllMS, s.NATS.TTFTP50AllMS)
	_, err := fmt.Fprintf(w, "gateway: tokens/s %.3f× NATS (target ≥ %.2f), TTFT p50 %+.2f ms, 95%% interval [%+.2f, %+.2f] (target ≤ %.0f ms): %s; %s, %d cores; load %s -> %s\n",
		s.TokensRatio, TargetTokensRatio, s.TTFTDiffMS, s.TTFTDiffCI95MS[0], s.TTFTDiffCI95MS[1], TargetTTFTDiffMS, met, s.CPU, s.Cores, s.LoadBefore, s.LoadAfter)
	return err
}
