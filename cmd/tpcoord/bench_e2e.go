package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/coordinator/launch"
	"github.com/tpcoord/tpcoord/rank/client"
)

// e2eCombo is one switch position of each of the three stages.
type e2eCombo struct {
	Noise, Sampling, Ranks string
}

func (c e2eCombo) String() string { return c.Noise + "+" + c.Sampling + "+" + c.Ranks }

// The baseline is what the upstream work started from; the full
// optimisation has every stage switched on.
var (
	e2eBaseline = e2eCombo{"sync", "softmax", "all"}
	e2eFull     = e2eCombo{"pool", "logspace", "rank0"}
)

// e2eStage is one stage of the optimisation: its flag's off and on values.
type e2eStage struct {
	name    string
	off, on string
	set     func(c *e2eCombo, v string)
}

var e2eStages = []e2eStage{
	{"noise", "sync", "pool", func(c *e2eCombo, v string) { c.Noise = v }},
	{"sampling", "softmax", "logspace", func(c *e2eCombo, v string) { c.Sampling = v }},
	{"sampling-ranks", "all", "rank0", func(c *e2eCombo, v string) { c.Ranks = v }},
}

// allE2ECombos lists the 8 combinations, baseline first.
func allE2ECombos() []e2eCombo {
	var out []e2eCombo
	for _, n := range []string{"sync", "pool"} {
		for _, s := range []string{"softmax", "logspace"} {
			for _, r := range []string{"all", "rank0"} {
				out = append(out, e2eCombo{n, s, r})
			}
		}
	}
	return out
}

type benchE2EOptions struct {
	nproc       int
	batch       int
	vocab       int
	forwardTime time.Duration
	tokens      int
	cpus        string
	combos      []string
	json        bool
	timeout     time.Duration
}

// benchE2EResult is one JSON line of `tpcoord bench e2e`: one combination.
type benchE2EResult struct {
	Kind          string  `json:"kind"` // "combo"
	CPU           string  `json:"cpu"`
	Cores         int     `json:"cores"`
	Go            string  `json:"go"`
	CPUs          string  `json:"cpus,omitempty"` // taskset list the whole launch ran under
	NProc         int     `json:"nproc"`
	Batch         int     `json:"batch"`
	Vocab         int     `json:"vocab"`
	ForwardTimeMS float64 `json:"forward_time_ms"`
	Tokens        int     `json:"tokens"`
	Combo         string  `json:"combo"`
	Noise         string  `json:"noise"`
	Sampling      string  `json:"sampling"`
	SamplingRanks string  `json:"sampling_ranks"`
	OutputTokens  int     `json:"output_tokens"`
	TotalS        float64 `json:"total_s"`
	TokensPerS    float64 `json:"output_tokens_per_s"`
	// VsBaseline is TokensPerS over the baseline's (sync+softmax+all) in
	// the same run; absent if the baseline was not measured.
	VsBaseline *float64 `json:"vs_baseline,omitempty"`
	// Step is rank 0's step-time breakdown over the batch's steps (median
	// ms per phase, from its flight recorder); absent if it could not be
	// read.
	Step *stepBreakdown `json:"step_median_ms,omitempty"`
}

// stepBreakdown is the median time per phase of rank 0's steps.
type stepBreakdown struct {
	Steps   int     `json:"steps"`
	Await   float64 `json:"await"`
	Publish float64 `json:"publish"`
	Forward float64 `json:"forward"`
	Sample  float64 `json:"sample"`
	Reply   float64 `json:"reply"`
	Total   float64 `json:"total"`
}

func breakdown(steps []client.StepTiming) *stepBreakdown {
	if len(steps) == 0 {
		return nil
	}
	med := func(f func(client.StepTiming) float64) float64 {
		v := make([]float64, len(steps))
		for i, s := range steps {
			v[i] = f(s)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	return &stepBreakdown{
		Steps:   len(steps),
		Await:   med(func(s client.StepTiming) float64 { return s.AwaitMs }),
		Publish: med(func(s client.StepTiming) float64 { return s.PublishMs }),
		Forward: med(func(s client.StepTiming) float64 { return s.ForwardMs }),
		Sample:  med(func(s client.StepTiming) float64 { return s.SampleMs }),
		Reply:   med(func(s client.StepTiming) float64 { return s.ReplyMs }),
		Total:   med(func(s client.StepTiming) float64 { return s.TotalMs }),
	}
}

// benchE2EStage is one JSON line per stage, after the combinations: the
// stage's own contribution, as tokens/s ratios. OnAlone is
// (baseline with only this stage on) / baseline; OffAlone is full /
// (full with only this stage off). Absent when a combination is missing.
type benchE2EStage struct {
	Kind     string   `json:"kind"` // "stage"
	Stage    string   `json:"stage"`
	Off      string   `json:"off"`
	On       string   `json:"on"`
	OnAlone  *float64 `json:"only_on_vs_baseline,omitempty"`
	OffAlone *float64 `json:"full_vs_only_off,omitempty"`
}

func newBenchE2ECmd() *cobra.Command {
	o := benchE2EOptions{}
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
			return runBenchE2E(cmd.Context(), o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fs := cmd.Flags()
	fs.IntVar(&o.nproc, "nproc", 4, "ranks (agent processes)")
	fs.IntVar(&o.batch, "batch", 32, "concurrent requests (and --max-batch)")
	fs.IntVar(&o.vocab, "vocab", 100352, "vocabulary size")
	fs.DurationVar(&o.forwardTime, "forward-time", 20*time.Millisecond, "synthetic forward pass wall time")
	fs.IntVar(&o.tokens, "tokens", 64, "output tokens per request (max_tokens, ignore_eos)")
	fs.StringVar(&o.cpus, "cpus", "", "run each launch under taskset -c CPUS (e.g. 0-1); empty: no pinning")
	fs.StringSliceVar(&o.combos, "combos", []string{"all"}, "combinations noise+sampling+ranks (e.g. sync+softmax+all,pool+logspace+rank0), or all")
	fs.BoolVar(&o.json, "json", false, "JSON lines instead of a table")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Minute, "give up on one combination after this long")
	return cmd
}

func (o *benchE2EOptions) validate() ([]e2eCombo, error) {
	switch {
	case o.nproc < 1 || o.nproc > 64:
		return nil, configError("--nproc: must be in [1, 64], got %d", o.nproc)
	case o.batch < 1 || o.batch > broadcast.MaxAdmissions:
		return nil, configError("--batch: must be in [1, %d], got %d", broadcast.MaxAdmissions, o.batch)
	case o.vocab < 16 || o.vocab > 1<<24:
		return nil, configError("--vocab: must be in [16, %d], got %d", 1<<24, o.vocab)
	case o.forwardTime < 0:
		return nil, configError("--forward-time: must be >= 0, got %v", o.forwardTime)
	case o.tokens < 1:
		return nil, configError("--tokens: must be >= 1, got %d", o.tokens)
	case o.timeout <= 0:
		return nil, configError("--timeout: must be > 0, got %v", o.timeout)
	}
	if o.cpus != "" {
		if _, err := exec.LookPath("taskset"); err != nil {
			return nil, configError("--cpus: taskset not found (util-linux): %v", err)
		}
	}
	all := allE2ECombos()
	want := map[e2eCombo]bool{}
	for _, s := range o.combos {
		if s == "all" {
			for _, c := range all {
				want[c] = true
			}
			continue
		}
		parts := strings.Split(s, "+")
		c := e2eCombo{}
		if len(parts) == 3 {
			c = e2eCombo{parts[0], parts[1], parts[2]}
		}
		found := false
		for _, a := range all {
			found = found || a == c
		}
		if !found {
			return nil, configError("--combos: %q is not noise+sampling+ranks with noise sync|pool, sampling softmax|logspace, ranks all|rank0", s)
		}
		want[c] = true
	}
	var out []e2eCombo // canonical order: the baseline first
	for _, c := range all {
		if want[c] {
			out = append(out, c)
		}
	}
	return out, nil
}

func runBenchE2E(ctx context.Context, o benchE2EOptions, w, progress io.Writer) error {
	combos, err := o.validate()
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("locate own binary: %w", err)
	}
	dir, err := os.MkdirTemp("", "tpcoord-bench-e2e-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cpu := cpuModel()
	if !o.json {
		fmt.Fprintf(w, "machine: %s, %d cores, %s; cpus %q; nproc %d, batch %d, vocab %d, forward %v, tokens %d\n",
			cpu, runtime.NumCPU(), runtime.Version(), o.cpus, o.nproc, o.batch, o.vocab, o.forwardTime, o.tokens)
		fmt.Fprintf(w, "%-24s %14s %10s %12s  %s\n", "combination", "output_tok/s", "total_s", "vs_baseline", "rank 0 step ms (median)")
	}
	rate := map[e2eCombo]float64{}
	for i, c := range combos {
		fmt.Fprintf(progress, "bench e2e: [%d/%d] %s ...\n", i+1, len(combos), c)
		n, elapsed, steps, err := benchE2ECase(ctx, o, c, self, dir, i, progress)
		if err != nil {
			return fmt.Errorf("%s: %w", c, err)
		}
		r := benchE2EResult{Kind: "combo", CPU: cpu, Cores: runtime.NumCPU(), Go: runtime.Version(), CPUs: o.cpus,
			NProc: o.nproc, Batch: o.batch, Vocab: o.vocab, ForwardTimeMS: float64(o.forwardTime.Microseconds()) / 1000,
			Tokens: o.tokens, Combo: c.String(), Noise: c.Noise, Sampling: c.Sampling, SamplingRanks: c.Ranks,
			OutputTokens: n, TotalS: elapsed.Seconds(), TokensPerS: float64(n) / elapsed.Seconds(), Step: breakdown(steps)}
		rate[c] = r.TokensPerS
		if b, ok := rate[e2eBaseline]; ok && b > 0 {
			v := r.TokensPerS / b
			r.VsBaseline = &v
		}
		fmt.Fprintf(progress, "bench e2e: %s: %d tokens in %.2fs: %.1f tokens/s\n", c, n, r.TotalS, r.TokensPerS)
		if err := printBenchE2E(w, r, o.json); err != nil {
			return err
		}
	}
	ratio := func(a, b e2eCombo) *float64 {
		ra, oka := rate[a]
		rb, okb := rate[b]
		if !oka || !okb || rb == 0 {
			return nil
		}
		v := ra / rb
		return &v
	}
	if !o.json {
		fmt.Fprintf(w, "%-16s %-20s %24s %20s\n", "stage", "off -> on", "only_on_vs_baseline", "full_vs_only_off")
	}
	for _, st := range e2eStages {
		onAlone, offAlone := e2eBaseline, e2eFull
		st.set(&onAlone, st.on)
		st.set(&offAlone, st.off)
		s := benchE2EStage{Kind: "stage", Stage: st.name, Off: st.off, On: st.on,
			OnAlone: ratio(onAlone, e2eBaseline), OffAlone: ratio(e2eFull, offAlone)}
		if err := printBenchE2EStage(w, s, o.json); err != nil {
			return err
		}
	}
	return nil
}

func printBenchE2E(w io.Writer, r benchE2EResult, asJSON bool) error {
	if asJSON {
		return writeJSONLine(w, r)
	}
	step := "-"
	if b := r.Step; b != nil {
		step = fmt.Sprintf("%.1f: forward %.1f, sample %.1f (medians of each)", b.Total, b.Forward, b.Sample)
	}
	_, err := fmt.Fprintf(w, "%-24s %14.1f %10.2f %12s  %s\n", r.Combo, r.TokensPerS, r.TotalS, fmtRatio(r.VsBaseline), step)
	return err
}

func printBenchE2EStage(w io.Writer, s benchE2EStage, asJSON bool) error {
	if asJSON {
		return writeJSONLine(w, s)
	}
	_, err := fmt.Fprintf(w, "%-16s %-20s %24s %20s\n", s.Stage, s.Off+" -> "+s.On, fmtRatio(s.OnAlone), fmtRatio(s.OffAlone))
	return err
}

func fmtRatio(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.3f", *v)
}

// benchE2ECase runs one combination: start launch, wait for its ready
// file, run the batch, stop launch. It returns the output tokens and the
// wall time from the first submission to the last final reply.
func benchE2ECase(ctx context.Context, o benchE2EOptions, c e2eCombo, self, dir string, i int, progress io.Writer) (int, time.Duration, []client.StepTiming, error) {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	j, err := startBenchJob(ctx, self, o.cpus, dir, strconv.Itoa(i), []string{
		"--nproc", strconv.Itoa(o.nproc), "--job", "bench-e2e",
		"--vocab", strconv.Itoa(o.vocab), "--forward-time", o.forwardTime.String(),
		"--max-batch", strconv.Itoa(o.batch), "--noise-pool-rows", strconv.Itoa(max(128, 3*o.batch)),
		"--noise", c.Noise, "--sampling", c.Sampling, "--sampling-ranks", c.Ranks})
	if err != nil {
		return 0, 0, nil, err
	}
	// One short request first: the first step pays for page faults and
	// the noise pool's first rows in every combination alike.
	if _, _, err := submitBatch(ctx, j.nc, j.subj, 1, 2, o.vocab, 0.8, 1<<20); err != nil {
		return 0, 0, nil, j.fail(fmt.Errorf("warm-up: %w", err))
	}
	start := time.Now()
	n, elapsed, err := submitBatch(ctx, j.nc, j.subj, o.batch, o.tokens, o.vocab, 0.8, 0)
	if err != nil {
		return 0, 0, nil, j.fail(err)
	}
	steps, err := j.stepTimings(ctx, start)
	if err != nil {
		fmt.Fprintf(progress, "bench e2e: %s: no step breakdown: %v\n", c, err)
	}
	j.stopQuietly(progress, "bench e2e: "+c.String())
	return n, elapsed, steps, nil
}

func waitReadyFile(ctx context.Context, path string, exited <-chan struct{}, waitErr *error) (launch.ReadyInfo, error) {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		if data, err := os.ReadFile(path); err == nil {
			var info launch.ReadyInfo
			if json.Unmarshal(data, &info) == nil && info.NATSURL != "" {
				return info, nil
			}
		}
		select {
		case <-ctx.Done():
			return launch.ReadyInfo{}, fmt.Errorf("launch not ready: %w", ctx.Err())
		case <-exited:
			return launch.ReadyInfo{}, fmt.Errorf("launch exited before it was ready: %v", *waitErr)
		case <-t.C:
		}
	}
}
