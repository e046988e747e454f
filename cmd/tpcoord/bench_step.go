package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/rank/client"
)

// bsTargetRatio is DESIGN.md's target at TP 8: coordinator overhead per
// step ≤ 1.5 × the raw TCP fan-out floor. Reported, never asserted.
const bsTargetRatio = 1.5

// bsFlightSteps is the flight recorder size the bench gives the agents, so
// that rank 0's dump holds every step of the run.
const bsFlightSteps = 1 << 16

type benchStepOptions struct {
	nproc       []int
	batch       int
	vocab       int
	tokens      int
	forwardTime time.Duration
	payload     int
	interval    time.Duration
	messages    int
	json        bool
	timeout     time.Duration
}

// benchStepResult is one JSON line of `tpcoord bench step`: one world size.
// Step figures come from rank 0's flight recorder, over the steps of the
// measured batch (rows > 0); overhead = total − forward − sample.
type benchStepResult struct {
	CPU           string  `json:"cpu"`
	Cores         int     `json:"cores"`
	Go            string  `json:"go"`
	NProc         int     `json:"nproc"`
	Batch         int     `json:"batch"`
	Vocab         int     `json:"vocab"`
	Tokens        int     `json:"tokens"`
	ForwardTimeMS float64 `json:"forward_time_ms"`
	Steps         int     `json:"steps"`
	OverheadP50US float64 `json:"overhead_p50_us"`
	OverheadP90US float64 `json:"overhead_p90_us"`
	OverheadP99US float64 `json:"overhead_p99_us"`
	// Medians of rank 0's phases over the same steps, for where the time goes.
	StepP50US    float64 `json:"step_p50_us"`
	AwaitP50US   float64 `json:"await_p50_us"`
	PublishP50US float64 `json:"publish_p50_us"`
	ForwardP50US float64 `json:"forward_p50_us"`
	SampleP50US  float64 `json:"sample_p50_us"`
	ReplyP50US   float64 `json:"reply_p50_us"`
	// The raw TCP fan-out to nproc−1 follower processes, same run (bench
	// broadcast's machinery); absent for nproc 1.
	FloorFollowers int     `json:"floor_followers"`
	FloorPayload   int     `json:"floor_payload"`
	FloorP50US     float64 `json:"floor_p50_us,omitempty"`
	FloorP99US     float64 `json:"floor_p99_us,omitempty"`
	Ratio          float64 `json:"overhead_p50_over_floor_p50,omitempty"`
	TargetRatio    float64 `json:"target_ratio"`
	// TargetMet applies the TP 8 target's threshold to this N's ratio.
	TargetMet bool `json:"target_met"`
}

func newBenchStepCmd() *cobra.Command {
	var o benchStepOptions
	cmd := &cobra.Command{
		Use:   "step",
		Short: "Coordinator overhead per step of a real local cluster vs the raw TCP fan-out floor",
		Long: `For every --nproc N: runs 'tpcoord launch' with a zero-cost forward
(--forward-time 0), submits --batch concurrent greedy requests of --tokens
output tokens (ignore_eos), then has rank 0 dump its flight recorder
(SIGUSR1, --flight-dir) and reads every step of the batch from it.
Overhead per step is rank 0's step wall time minus its forward and sample
phases (await, publish, reply and the gaps between them); the bench reports
its p50/p90/p99 and the median of each phase.

In the same run it measures the raw TCP fan-out floor to N−1 follower
processes (the machinery of 'bench broadcast') and reports overhead p50 over
floor p50 against the target ratio 1.5 (DESIGN.md, at TP 8).

One JSON line per N with --json, a table otherwise; progress on stderr.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.validate(); err != nil {
				return err
			}
			return runBenchStep(cmd.Context(), o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fs := cmd.Flags()
	fs.IntSliceVar(&o.nproc, "nproc", []int{2, 4, 8}, "world sizes, comma-separated")
	fs.IntVar(&o.batch, "batch", 32, "concurrent requests (and --max-batch)")
	fs.IntVar(&o.vocab, "vocab", 4096, "vocabulary size")
	fs.IntVar(&o.tokens, "tokens", 64, "output tokens per request (max_tokens, ignore_eos)")
	fs.DurationVar(&o.forwardTime, "forward-time", 0, "synthetic forward pass wall time")
	fs.IntVar(&o.payload, "floor-payload", 256, "floor: message size in bytes")
	fs.DurationVar(&o.interval, "floor-interval", 200*time.Microsecond, "floor: time between two messages")
	fs.IntVar(&o.messages, "floor-messages", 2000, "floor: messages per N (the first 5% are warm-up)")
	fs.BoolVar(&o.json, "json", false, "JSON lines instead of a table")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Minute, "give up on one cluster after this long")
	return cmd
}

func (o benchStepOptions) validate() error {
	if len(o.nproc) == 0 {
		return configError("--nproc: give at least one world size")
	}
	for _, n := range o.nproc {
		if n < 1 || n > 64 {
			return configError("--nproc: %d is outside 1..64", n)
		}
	}
	switch {
	case o.batch < 1 || o.batch > broadcast.MaxAdmissions:
		return configError("--batch: must be in [1, %d], got %d", broadcast.MaxAdmissions, o.batch)
	case o.vocab < 16 || o.vocab > 1<<24:
		return configError("--vocab: must be in [16, %d], got %d", 1<<24, o.vocab)
	case o.tokens < 1:
		return configError("--tokens: must be >= 1, got %d", o.tokens)
	case o.forwardTime < 0:
		return configError("--forward-time: must be >= 0, got %v", o.forwardTime)
	case o.timeout <= 0:
		return configError("--timeout: must be > 0, got %v", o.timeout)
	}
	return benchBroadcastOptions{followers: []int{1}, payload: o.payload, interval: o.interval, messages: o.messages, rounds: 1}.validate()
}

func runBenchStep(ctx context.Context, o benchStepOptions, w, progress io.Writer) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("locate own binary: %w", err)
	}
	dir, err := os.MkdirTemp("", "tpcoord-bench-step-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cpu, cores, gover := cpuModel(), runtime.NumCPU(), runtime.Version()
	if !o.json {
		fmt.Fprintf(w, "machine: %s, %d cores, %s; batch %d, vocab %d, tokens %d, forward %v; floor: %d B every %v\n",
			cpu, cores, gover, o.batch, o.vocab, o.tokens, o.forwardTime, o.payload, o.interval)
		fmt.Fprintf(w, "%5s %6s %9s %9s %9s %9s %9s %9s %9s %9s %9s %7s\n", "nproc", "steps", "ovh_p50", "ovh_p90", "ovh_p99",
			"step_p50", "await_p50", "pub_p50", "reply_p50", "floor_p50", "floor_p99", "ratio")
	}
	for i, n := range o.nproc {
		fmt.Fprintf(progress, "bench step: [%d/%d] nproc %d: cluster ...\n", i+1, len(o.nproc), n)
		steps, err := benchStepCluster(ctx, o, n, self, filepath.Join(dir, strconv.Itoa(i)), progress)
		if err != nil {
			return fmt.Errorf("nproc %d: %w", n, err)
		}
		r := bsSummarize(steps)
		r.CPU, r.Cores, r.Go = cpu, cores, gover
		r.NProc, r.Batch, r.Vocab, r.Tokens = n, o.batch, o.vocab, o.tokens
		r.ForwardTimeMS = float64(o.forwardTime.Microseconds()) / 1000
		r.FloorFollowers, r.FloorPayload, r.TargetRatio = n-1, o.payload, bsTargetRatio
		if n > 1 {
			fmt.Fprintf(progress, "bench step: [%d/%d] nproc %d: TCP floor to %d followers ...\n", i+1, len(o.nproc), n, n-1)
			// The floor's processes get the runtime settings launch gave
			// the ranks (launch's --tune-runtime default).
			c := bcCase{self: self, n: n - 1, transport: "tcp", progress: progress, o: benchBroadcastOptions{
				followers: []int{n - 1}, payload: o.payload, interval: o.interval, messages: o.messages, rounds: 1, tune: true}}
			fl, err := c.run(ctx)
			if err != nil {
				return fmt.Errorf("nproc %d: tcp floor: %w", n, err)
			}
			r.FloorP50US, r.FloorP99US = fl.p50, fl.p99
			if fl.p50 > 0 {
				r.Ratio = r.OverheadP50US / fl.p50
				r.TargetMet = r.Ratio <= bsTargetRatio
			}
		}
		if err := printBenchStep(w, r, o.json); err != nil {
			return err
		}
	}
	return nil
}

// bsSummarize computes the percentiles over the steps (in µs).
func bsSummarize(steps []client.StepTiming) benchStepResult {
	col := func(f func(client.StepTiming) float64) []float64 {
		v := make([]float64, len(steps))
		for i, s := range steps {
			v[i] = 1000 * f(s)
		}
		return v
	}
	r := benchStepResult{Steps: len(steps)}
	if len(steps) == 0 {
		return r
	}
	p50 := func(v []float64) float64 { m, _, _ := bnStats(v); return m }
	r.OverheadP50US, r.OverheadP90US, r.OverheadP99US = bnStats(col(func(s client.StepTiming) float64 {
		return max(0, s.TotalMs-s.ForwardMs-s.SampleMs)
	}))
	r.StepP50US = p50(col(func(s client.StepTiming) float64 { return s.TotalMs }))
	r.AwaitP50US = p50(col(func(s client.StepTiming) float64 { return s.AwaitMs }))
	r.PublishP50US = p50(col(func(s client.StepTiming) float64 { return s.PublishMs }))
	r.ForwardP50US = p50(col(func(s client.StepTiming) float64 { return s.ForwardMs }))
	r.SampleP50US = p50(col(func(s client.StepTiming) float64 { return s.SampleMs }))
	r.ReplyP50US = p50(col(func(s client.StepTiming) float64 { return s.ReplyMs }))
	return r
}

func printBenchStep(w io.Writer, r benchStepResult, asJSON bool) error {
	if asJSON {
		return writeJSONLine(w, r)
	}
	ratio := "-"
	if r.Ratio > 0 {
		ratio = fmt.Sprintf("%.2fx", r.Ratio)
	}
	_, err := fmt.Fprintf(w, "%5d %6d %9.0f %9.0f %9.0f %9.0f %9.0f %9.0f %9.0f %9.0f %9.0f %7s\n", r.NProc, r.Steps,
		r.OverheadP50US, r.OverheadP90US, r.OverheadP99US, r.StepP50US, r.AwaitP50US, r.PublishP50US, r.ReplyP50US,
		r.FloorP50US, r.FloorP99US, ratio)
	return err
}

// benchStepCluster runs one cluster of n ranks: launch, a warm-up request,
// the measured batch, a flight dump of rank 0, stop. It returns rank 0's
// steps that started after the batch was submitted and had rows.
func benchStepCluster(ctx context.Context, o benchStepOptions, n int, self, dir string, progress io.Writer) ([]client.StepTiming, error) {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	j, err := startBenchJob(ctx, self, "", dir, "step", []string{
		"--nproc", strconv.Itoa(n), "--job", "bench-step",
		"--vocab", strconv.Itoa(o.vocab), "--forward-time", o.forwardTime.String(),
		"--max-batch", strconv.Itoa(o.batch), "--noise-pool-rows", strconv.Itoa(max(128, 3*o.batch))})
	if err != nil {
		return nil, err
	}
	if len(j.info.PIDs) != n {
		return nil, j.fail(fmt.Errorf("ready file lists %d pids, want %d", len(j.info.PIDs), n))
	}
	if _, _, err := submitBatch(ctx, j.nc, j.subj, 1, 2, o.vocab, 0, 0); err != nil {
		return nil, j.fail(fmt.Errorf("warm-up: %w", err))
	}
	start := time.Now()
	got, _, err := submitBatch(ctx, j.nc, j.subj, o.batch, o.tokens, o.vocab, 0, 0)
	if err == nil && got != o.batch*o.tokens {
		err = fmt.Errorf("%d tokens, want %d", got, o.batch*o.tokens)
	}
	if err != nil {
		return nil, j.fail(err)
	}
	fmt.Fprintf(progress, "bench step: nproc %d: batch done in %v; reading rank 0's flight recorder\n", n, time.Since(start).Round(time.Millisecond))
	steps, err := j.stepTimings(ctx, start)
	if err != nil {
		return nil, j.fail(err)
	}
	j.stopQuietly(progress, fmt.Sprintf("bench step: nproc %d", n))
	if len(steps) == 0 {
		return nil, errors.New("rank 0's flight recorder has no step of the batch")
	}
	return steps, nil
}

// bsSyncBuffer is a bytes.Buffer that launch's stdout and stderr copiers
// may write concurrently with a reader.
type bsSyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *bsSyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *bsSyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// bsReadDump waits for the flight dump file whose name starts with
// "flight-"+label and returns its steps that started at or after since and
// had rows.
func bsReadDump(ctx context.Context, dir, label string, since time.Time) ([]client.StepTiming, error) {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		matches, _ := filepath.Glob(filepath.Join(dir, "flight-"+label+"-*.txt"))
		if len(matches) > 0 {
			// The dump is written with one WriteFile; give it a moment to
			// finish if the file was just created.
			data, err := os.ReadFile(matches[len(matches)-1])
			if err == nil {
				steps, complete, err := bsParseDump(data, since)
				if err != nil {
					return nil, err
				}
				if complete {
					return steps, nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("no flight dump of %s in %s: %w", label, dir, ctx.Err())
		case <-t.C:
		}
	}
}

// bsParseDump parses rank.FlightRecorder.Dump's text: a header line ("…;
// last K of M steps (ms):"), a column line, then K step lines. complete is
// false while fewer than K step lines are there.
func bsParseDump(data []byte, since time.Time) (steps []client.StepTiming, complete bool, err error) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	if !sc.Scan() {
		return nil, false, nil
	}
	var kept, total int
	_, hdr, ok := strings.Cut(sc.Text(), "; last ")
	if !ok {
		return nil, false, fmt.Errorf("flight dump: unexpected header %q", sc.Text())
	}
	if _, err := fmt.Sscanf(hdr, "%d of %d steps", &kept, &total); err != nil {
		return nil, false, fmt.Errorf("flight dump: header %q: %v", sc.Text(), err)
	}
	if !sc.Scan() { // column names
		return nil, false, nil
	}
	lines := 0
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 9 {
			return nil, false, fmt.Errorf("flight dump: step line %q", sc.Text())
		}
		var s client.StepTiming
		if s.Step, err = strconv.ParseUint(f[0], 10, 64); err != nil {
			return nil, false, fmt.Errorf("flight dump: step line %q: %v", sc.Text(), err)
		}
		if s.Start, err = time.Parse("2006-01-02T15:04:05.000000", f[1]); err != nil {
			return nil, false, fmt.Errorf("flight dump: step line %q: %v", sc.Text(), err)
		}
		if s.Rows, err = strconv.Atoi(f[2]); err != nil {
			return nil, false, fmt.Errorf("flight dump: step line %q: %v", sc.Text(), err)
		}
		vals := make([]float64, 6)
		for j := range vals {
			if vals[j], err = strconv.ParseFloat(f[3+j], 64); err != nil {
				return nil, false, fmt.Errorf("flight dump: step line %q: %v", sc.Text(), err)
			}
		}
		s.AwaitMs, s.PublishMs, s.ForwardMs, s.SampleMs, s.ReplyMs, s.TotalMs = vals[0], vals[1], vals[2], vals[3], vals[4], vals[5]
		lines++
		if s.Rows > 0 && !s.Start.Before(since.UTC().Truncate(time.Microsecond)) {
			steps = append(steps, s)
		}
	}
	return steps, lines == kept, sc.Err()
}
