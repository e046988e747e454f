package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/cmd/tpcoord/internal/bench/job"
	"github.com/tpcoord/tpcoord/cmd/tpcoord/internal/bench/stats"
	"github.com/tpcoord/tpcoord/rank/client"
)

// Options configure Run. Errors of Validate name the tpcoord flag.
type Options struct {
	Self        string        // the tpcoord binary to run launch from
	NProc       int           // --nproc: ranks
	Batch       int           // --batch: concurrent requests (and launch's --max-batch)
	Vocab       int           // --vocab
	ForwardTime time.Duration // --forward-time: synthetic forward pass
	Tokens      int           // --tokens: output tokens per request
	CPUs        string        // --cpus: run each launch under taskset -c CPUs
	Combos      []string      // --combos: noise+sampling+ranks, or all
	JSON        bool          // --json: JSON lines instead of a table
	Timeout     time.Duration // --timeout: per combination
	Executor    string        // --executor: synthetic, or worker (a real model: Model)
	Model       Model         // the worker executor's flags
	Temperature float32       // --temperature of every request (0: greedy)
	TokensOut   string        // --tokens-out: append each request's tokens here as JSON lines
}

// Validate checks o, and that taskset is there when --cpus asks for it;
// its errors name the flag.
func (o Options) Validate() error {
	switch {
	case o.NProc < 1 || o.NProc > 64:
		return fmt.Errorf("--nproc: must be in [1, 64], got %d", o.NProc)
	case o.Batch < 1 || o.Batch > broadcast.MaxAdmissions:
		return fmt.Errorf("--batch: must be in [1, %d], got %d", broadcast.MaxAdmissions, o.Batch)
	case o.Vocab < 16 || o.Vocab > 1<<24:
		return fmt.Errorf("--vocab: must be in [16, %d], got %d", 1<<24, o.Vocab)
	case o.ForwardTime < 0:
		return fmt.Errorf("--forward-time: must be >= 0, got %v", o.ForwardTime)
	case o.Tokens < 1:
		return fmt.Errorf("--tokens: must be >= 1, got %d", o.Tokens)
	case o.Timeout <= 0:
		return fmt.Errorf("--timeout: must be > 0, got %v", o.Timeout)
	}
	if o.CPUs != "" {
		if _, err := exec.LookPath("taskset"); err != nil {
			return fmt.Errorf("--cpus: taskset not found (util-linux): %w", err)
		}
	}
	if _, err := selectCombos(o.Combos); err != nil {
		return err
	}
	if err := o.validateExecutor(); err != nil {
		return err
	}
	if err := o.validateTemperature(); err != nil {
		return err
	}
	if o.Self == "" {
		return errors.New("options: Self, the tpcoord binary to run launch from, is not set")
	}
	return nil
}

// Run measures every selected combination, one launch each, and writes one
// line per combination and then per stage to stdout, a table or JSON
// lines, and its progress to progress.
func Run(ctx context.Context, o Options, stdout, progress io.Writer) error {
	if err := o.Validate(); err != nil {
		return err
	}
	combos, _ := selectCombos(o.Combos) // Validate checked them
	// A --tokens-out that cannot be written fails now, not after a run.
	if o.TokensOut != "" {
		f, err := openTokensOut(o.TokensOut)
		if err != nil {
			return err
		}
		f.Close()
	}
	dir, err := os.MkdirTemp("", "tpcoord-bench-e2e-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	m := stats.ThisMachine()
	if !o.JSON {
		printHeader(stdout, o, m)
	}
	rate := map[Combo]float64{}
	for i, c := range combos {
		fmt.Fprintf(progress, "bench e2e: [%d/%d] %s ...\n", i+1, len(combos), c)
		r, err := measure(ctx, o, c, dir, i, progress)
		if err != nil {
			return fmt.Errorf("%s: %w", c, err)
		}
		r.Machine = m
		rate[c] = r.TokensPerS
		if b, ok := rate[Baseline]; ok && b > 0 {
			v := r.TokensPerS / b
			r.VsBaseline = &v
		}
		if err := printResult(stdout, r, o.JSON); err != nil {
			return err
		}
	}
	return printStages(stdout, rate, o.JSON)
}

// measure runs combination c (the i-th) and returns its line, without the
// machine and the ratio to the baseline.
func measure(ctx context.Context, o Options, c Combo, dir string, i int, progress io.Writer) (Result, error) {
	run, err := runCombo(ctx, o, c, dir, i, progress)
	if err != nil {
		return Result{}, err
	}
	n, elapsed := run.tokens, run.elapsed
	r := Result{Kind: "combo", CPUs: o.CPUs,
		NProc: o.NProc, Batch: o.Batch, Vocab: o.Vocab,
		Tokens: o.Tokens, Combo: c.String(), Noise: c.Noise, Sampling: c.Sampling, SamplingRanks: c.Ranks,
		OutputTokens: n, TotalS: elapsed.Seconds(), TokensPerS: float64(n) / elapsed.Seconds(), Step: breakdown(run.steps),
		StepMean: meanBreakdown(run.steps), Pool: run.pool}
	if o.Executor == WorkerExecutor {
		r.Executor, r.Impl = WorkerExecutor, "tpcoord"
	} else {
		r.Synthetic = &Synthetic{ForwardTimeMS: float64(o.ForwardTime.Microseconds()) / 1000}
	}
	fmt.Fprintf(progress, "bench e2e: %s: %d tokens in %.2fs: %.1f tokens/s\n", c, n, r.TotalS, r.TokensPerS)
	return r, nil
}

// comboRun is what runCombo measured: the output tokens, the wall time
// from the first submission to the last final reply, rank 0's steps (none
// if they could not be read) and its noise pool (nil without one).
type comboRun struct {
	tokens  int
	elapsed time.Duration
	steps   []api.StepTiming
	pool    *PoolCounts
}

// runCombo runs one combination: start launch, wait for its ready file,
// run the batch, stop launch.
func runCombo(ctx context.Context, o Options, c Combo, dir string, i int, progress io.Writer) (comboRun, error) {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	args := append([]string{"--nproc", strconv.Itoa(o.NProc), "--job", "bench-e2e", "--vocab", strconv.Itoa(o.Vocab)},
		o.executorArgs()...)
	j, err := job.Start(ctx, job.Launch{Self: o.Self, CPUs: o.CPUs, Dir: dir, Name: strconv.Itoa(i), Args: append(args,
		"--max-batch", strconv.Itoa(o.Batch), "--noise-pool-rows", strconv.Itoa(max(128, 3*o.Batch)),
		"--noise", c.Noise, "--sampling", c.Sampling, "--sampling-ranks", c.Ranks)})
	if err != nil {
		return comboRun{}, err
	}
	// A short batch of the measured size first: a process's first full
	// batch pays once for page faults (rank 0's logits and sampler
	// buffers: a first step of 113 ms against 21 ms), which is start-up,
	// not throughput.
	if _, _, err := j.Submit(ctx, job.Batch{Requests: o.Batch, Tokens: 2, Vocab: o.Vocab, Temperature: o.Temperature, SeedBase: 1 << 20}); err != nil {
		return comboRun{}, j.Fail(fmt.Errorf("warm-up: %w", err))
	}
	before := samplerStats(ctx, j)
	start := time.Now()
	toks, elapsed, err := j.SubmitTokens(ctx, job.Batch{Requests: o.Batch, Tokens: o.Tokens, Vocab: o.Vocab, Temperature: o.Temperature})
	if err != nil {
		return comboRun{}, j.Fail(err)
	}
	if err := writeTokens(o, c, toks); err != nil {
		return comboRun{}, j.Fail(err)
	}
	n := 0
	for _, t := range toks {
		n += len(t)
	}
	pool := poolCounts(before, samplerStats(ctx, j))
	steps, err := j.StepTimings(ctx, start)
	if err != nil {
		fmt.Fprintf(progress, "bench e2e: %s: no step breakdown: %v\n", c, err)
	}
	j.StopQuietly(progress, "bench e2e: "+c.String())
	return comboRun{tokens: n, elapsed: elapsed, steps: steps, pool: pool}, nil
}

// samplerStats is rank 0's noise pool counters from its status, or nil.
func samplerStats(ctx context.Context, j *job.Job) map[string]uint64 {
	ranks, err := client.CollectStatus(ctx, j.Bus(), j.Subjects(), 2*time.Second)
	if err != nil {
		return nil
	}
	for _, r := range ranks {
		if r.Rank == 0 {
			return r.Sampler
		}
	}
	return nil
}
