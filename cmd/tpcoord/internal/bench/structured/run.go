package structured

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/cmd/tpcoord/internal/bench/job"
	"github.com/tpcoord/tpcoord/cmd/tpcoord/internal/bench/stats"
	"github.com/tpcoord/tpcoord/coordinator/gateway/tokenizer"
)

// Run starts the job, warms it up, runs o.Rounds rounds of an
// unconstrained and a constrained batch (unconstrained first in even
// rounds, last in odd ones), and writes a line per batch and per round,
// then the summary, to stdout (a table or JSON lines), with progress on
// progress.
func Run(ctx context.Context, o Options, stdout, progress io.Writer) error {
	if err := o.Validate(); err != nil {
		return err
	}
	schema, _ := o.schema() // Validate read it
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	// The bench's own copy of the tokenizer: a finished constrained
	// output is checked to be JSON.
	dec, err := tokenizer.Load(o.Tokenizer)
	if err != nil {
		return fmt.Errorf("--tokenizer: %w", err)
	}
	dir, err := os.MkdirTemp("", "tpcoord-bench-structured-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	s := Summary{Kind: "summary", Machine: stats.ThisMachine(), AVX512F: stats.HasAVX512F(), Setup: o.setup(), LoadBefore: stats.LoadAvg()}
	fmt.Fprintf(progress, "bench structured: load average %s; a job of %d ranks, %d rounds of two batches of %d\n", s.LoadBefore, o.NProc, o.Rounds, o.Batch)
	if !o.JSON {
		printHeader(stdout, s)
	}
	j, err := job.Start(ctx, job.Launch{Self: o.Self, Dir: dir, Name: "0", Args: o.launchArgs()})
	if err != nil {
		return err
	}
	b := bench{o: o, schema: schema, j: j, dec: dec, out: stdout, progress: progress}
	batches, rounds, err := b.run(ctx)
	if err != nil {
		return j.Fail(err)
	}
	j.StopQuietly(progress, "bench structured")
	s.LoadAfter = stats.LoadAvg()
	summarize(&s, batches, rounds)
	return printSummary(stdout, s, o.JSON)
}

func (o Options) setup() Setup {
	return Setup{NProc: o.NProc, Batch: o.Batch, Vocab: o.Vocab, ForwardTimeMS: float64(o.ForwardTime.Microseconds()) / 1000,
		Tokens: o.Tokens, Temperature: Temperature, Tokenizer: o.Tokenizer, EOS: o.EOS, Schema: o.schemaName(), Rounds: o.Rounds}
}

// bench is one run on a started job.
type bench struct {
	o             Options
	schema        []byte
	j             *job.Job
	dec           decoder
	out, progress io.Writer
}

// timed is a batch's outcome and its wall-clock window, in which its
// steps are found in rank 0's flight recorder once every batch has run.
type timed struct {
	round       int
	constrained bool
	from, to    int64 // UnixNano
	outcome     batchOutcome
}

// line is t's line, its steps taken from steps.
func (t *timed) line(steps []api.StepTiming) BatchResult {
	t.outcome.steps = stepsIn(steps, t.from, t.to)
	kind := "batch"
	if t.round < 0 {
		kind = "warmup"
	}
	return batchResult(kind, t.round, kindName(t.constrained), t.outcome)
}

// run runs the warm-ups and the rounds, then reads rank 0's steps once and
// writes every line.
func (b bench) run(ctx context.Context) ([]BatchResult, []RoundResult, error) {
	// Warm-ups, not measured: an unconstrained batch of 2 tokens (a
	// process's first full batch pays for page faults), then a
	// constrained batch of the full length, which compiles the schema and
	// fills the mask cache with the states such outputs reach.
	if _, err := b.batch(ctx, -1, false, 2); err != nil {
		return nil, nil, fmt.Errorf("warm-up: %w", err)
	}
	warm, err := b.batch(ctx, -1, true, b.o.Tokens)
	if err != nil {
		return nil, nil, fmt.Errorf("constrained warm-up: %w", err)
	}
	var pairs [][2]*timed
	for r := range b.o.Rounds {
		var pair [2]*timed
		for i, constrained := range []bool{r%2 != 0, r%2 == 0} {
			if pair[i], err = b.batch(ctx, r, constrained, b.o.Tokens); err != nil {
				return nil, nil, fmt.Errorf("round %d, %s: %w", r, kindName(constrained), err)
			}
		}
		pairs = append(pairs, pair)
	}
	steps, err := b.j.StepTimings(ctx, time.Unix(0, warm.from))
	if err != nil {
		fmt.Fprintf(b.progress, "bench structured: no step breakdown: %v\n", err)
	}
	return b.lines(warm, pairs, steps)
}

// lines shapes and writes the warm-up's line, then each round's two batch
// lines and its round line, and returns the batches' and rounds' lines.
func (b bench) lines(warm *timed, pairs [][2]*timed, steps []api.StepTiming) ([]BatchResult, []RoundResult, error) {
	w := warm.line(steps)
	batches := []BatchResult{w}
	if err := printLine(b.out, w, b.o.JSON); err != nil {
		return nil, nil, err
	}
	var rounds []RoundResult
	for r, pair := range pairs {
		var line [2]BatchResult
		for i, t := range pair {
			line[i] = t.line(steps)
			if err := printLine(b.out, line[i], b.o.JSON); err != nil {
				return nil, nil, err
			}
		}
		batches = append(batches, line[0], line[1])
		first, unc, con := line[0].Batch, line[0], line[1]
		if pair[0].constrained {
			unc, con = con, unc
		}
		rr := roundResult(r, first, unc, con)
		rounds = append(rounds, rr)
		if err := printLine(b.out, rr, b.o.JSON); err != nil {
			return nil, nil, err
		}
	}
	return batches, rounds, nil
}

// batch runs one batch of round r (-1: a warm-up) of max tokens tokens.
func (b bench) batch(ctx context.Context, r int, constrained bool, tokens int) (*timed, error) {
	var schema []byte
	if constrained {
		schema = b.schema
	}
	o := b.o
	o.Tokens = tokens
	from := time.Now()
	out, err := submit(ctx, b.j, o.Batch, func(i int) *api.GenerateRequest { return request(o, schema, r, i) }, b.dec)
	if err != nil {
		return nil, err
	}
	t := &timed{round: r, constrained: constrained, from: from.UnixNano(), to: time.Now().UnixNano(), outcome: out}
	n := 0
	for _, toks := range out.tokens {
		n += len(toks)
	}
	fmt.Fprintf(b.progress, "bench structured: round %d, %s: %d tokens in %.2fs: %.1f tokens/s; %d stopped\n",
		r, kindName(constrained), n, out.elapsed, float64(n)/out.elapsed, out.stopped)
	return t, nil
}

func kindName(constrained bool) string {
	if constrained {
		return KindConstrained
	}
	return KindUnconstrained
}
