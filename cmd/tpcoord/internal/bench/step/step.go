package step

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/cmd/tpcoord/internal/bench/fanout"
	"github.com/tpcoord/tpcoord/cmd/tpcoord/internal/bench/job"
	"github.com/tpcoord/tpcoord/cmd/tpcoord/internal/bench/stats"
)

// TargetRatio is the project's target at TP 8: coordinator overhead per step
// ≤ 1.5 × the raw TCP fan-out floor. Reported, never asserted.
const TargetRatio = 1.5

// Options configure Run. Errors of Validate name the tpcoord flag.
type Options struct {
	Self          string        // the tpcoord binary to run launch and the floor's processes from
	NProc         []int         // --nproc: world sizes
	Batch         int           // --batch: concurrent requests (and launch's --max-batch)
	Vocab         int           // --vocab
	Tokens        int           // --tokens: output tokens per request
	ForwardTime   time.Duration // --forward-time: synthetic forward pass
	FloorPayload  int           // --floor-payload
	FloorInterval time.Duration // --floor-interval
	FloorMessages int           // --floor-messages
	JSON          bool          // --json: JSON lines instead of a table
	Timeout       time.Duration // --timeout: per cluster
}

// Validate checks o; its errors name the flag. The floor's are bench
// broadcast's (--payload, --interval, --messages).
func (o Options) Validate() error {
	if len(o.NProc) == 0 {
		return errors.New("--nproc: give at least one world size")
	}
	for _, n := range o.NProc {
		if n < 1 || n > 64 {
			return fmt.Errorf("--nproc: %d is outside 1..64", n)
		}
	}
	switch {
	case o.Batch < 1 || o.Batch > broadcast.MaxAdmissions:
		return fmt.Errorf("--batch: must be in [1, %d], got %d", broadcast.MaxAdmissions, o.Batch)
	case o.Vocab < 16 || o.Vocab > 1<<24:
		return fmt.Errorf("--vocab: must be in [16, %d], got %d", 1<<24, o.Vocab)
	case o.Tokens < 1:
		return fmt.Errorf("--tokens: must be >= 1, got %d", o.Tokens)
	case o.ForwardTime < 0:
		return fmt.Errorf("--forward-time: must be >= 0, got %v", o.ForwardTime)
	case o.Timeout <= 0:
		return fmt.Errorf("--timeout: must be > 0, got %v", o.Timeout)
	}
	return o.floor().Validate()
}

// floor is the TCP floor's configuration: the runtime settings launch gave
// the ranks (launch's --tune-runtime default).
func (o Options) floor() fanout.Options {
	return fanout.Options{Self: o.Self, Followers: []int{1}, Payload: o.FloorPayload, Interval: o.FloorInterval,
		Messages: o.FloorMessages, Rounds: 1, TuneRuntime: true}
}

// Run measures every world size of o and writes one line per size to
// stdout, a table or JSON lines, and its progress to progress.
func Run(ctx context.Context, o Options, stdout, progress io.Writer) error {
	if err := o.Validate(); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "tpcoord-bench-step-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	m := stats.ThisMachine()
	if !o.JSON {
		fmt.Fprintf(stdout, "machine: %s, %d cores, %s; batch %d, vocab %d, tokens %d, forward %v; floor: %d B every %v\n",
			m.CPU, m.Cores, m.Go, o.Batch, o.Vocab, o.Tokens, o.ForwardTime, o.FloorPayload, o.FloorInterval)
		fmt.Fprintf(stdout, "%5s %6s %9s %9s %9s %9s %9s %9s %9s %9s %9s %7s\n", "nproc", "steps", "ovh_p50", "ovh_p90", "ovh_p99",
			"step_p50", "await_p50", "pub_p50", "reply_p50", "floor_p50", "floor_p99", "ratio")
	}
	for i, n := range o.NProc {
		r, err := measure(ctx, o, i, n, filepath.Join(dir, strconv.Itoa(i)), progress)
		if err != nil {
			return fmt.Errorf("nproc %d: %w", n, err)
		}
		r.Machine = m
		if err := printResult(stdout, r, o.JSON); err != nil {
			return err
		}
	}
	return nil
}

// measure runs the cluster of n ranks (the i-th world size) and the floor
// to n−1 followers, and returns the line without the machine.
func measure(ctx context.Context, o Options, i, n int, dir string, progress io.Writer) (Result, error) {
	fmt.Fprintf(progress, "bench step: [%d/%d] nproc %d: cluster ...\n", i+1, len(o.NProc), n)
	steps, err := runCluster(ctx, o, n, dir, progress)
	if err != nil {
		return Result{}, err
	}
	r := summarize(steps)
	r.NProc, r.Batch, r.Vocab, r.Tokens = n, o.Batch, o.Vocab, o.Tokens
	r.ForwardTimeMS = float64(o.ForwardTime.Microseconds()) / 1000
	r.FloorFollowers, r.FloorPayload, r.TargetRatio = n-1, o.FloorPayload, TargetRatio
	if n == 1 {
		return r, nil
	}
	fmt.Fprintf(progress, "bench step: [%d/%d] nproc %d: TCP floor to %d followers ...\n", i+1, len(o.NProc), n, n-1)
	p50, p99, err := fanout.Floor(ctx, o.floor(), n-1, progress)
	if err != nil {
		return Result{}, fmt.Errorf("tcp floor: %w", err)
	}
	r.FloorP50US, r.FloorP99US = p50, p99
	if p50 > 0 {
		r.Ratio = r.OverheadP50US / p50
		r.TargetMet = r.Ratio <= TargetRatio
	}
	return r, nil
}

// runCluster runs one cluster of n ranks: launch, a warm-up request, the
// measured batch, a flight dump of rank 0, stop. It returns rank 0's
// steps that started after the batch was submitted and had rows.
func runCluster(ctx context.Context, o Options, n int, dir string, progress io.Writer) ([]api.StepTiming, error) {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	j, err := job.Start(ctx, job.Launch{Self: o.Self, Dir: dir, Name: "step", Args: []string{
		"--nproc", strconv.Itoa(n), "--job", "bench-step",
		"--vocab", strconv.Itoa(o.Vocab), "--forward-time", o.ForwardTime.String(),
		"--max-batch", strconv.Itoa(o.Batch), "--noise-pool-rows", strconv.Itoa(max(128, 3*o.Batch))}})
	if err != nil {
		return nil, err
	}
	if pids := len(j.Ready().PIDs); pids != n {
		return nil, j.Fail(fmt.Errorf("ready file lists %d pids, want %d", pids, n))
	}
	if _, _, err := j.Submit(ctx, job.Batch{Requests: 1, Tokens: 2, Vocab: o.Vocab}); err != nil {
		return nil, j.Fail(fmt.Errorf("warm-up: %w", err))
	}
	start := time.Now()
	got, _, err := j.Submit(ctx, job.Batch{Requests: o.Batch, Tokens: o.Tokens, Vocab: o.Vocab})
	if err == nil && got != o.Batch*o.Tokens {
		err = fmt.Errorf("%d tokens, want %d", got, o.Batch*o.Tokens)
	}
	if err != nil {
		return nil, j.Fail(err)
	}
	fmt.Fprintf(progress, "bench step: nproc %d: batch done in %v; reading rank 0's flight recorder\n", n, time.Since(start).Round(time.Millisecond))
	steps, err := j.StepTimings(ctx, start)
	if err != nil {
		return nil, j.Fail(err)
	}
	j.StopQuietly(progress, fmt.Sprintf("bench step: nproc %d", n))
	if len(steps) == 0 {
		return nil, errors.New("rank 0's flight recorder has no step of the batch")
	}
	return steps, nil
}
