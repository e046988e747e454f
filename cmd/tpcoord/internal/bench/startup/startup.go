package startup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tpcoord/tpcoord/cmd/tpcoord/internal/bench/job"
	"github.com/tpcoord/tpcoord/cmd/tpcoord/internal/bench/stats"
	"github.com/tpcoord/tpcoord/coordinator/launch"
)

// The project's target: a job of TargetNProc ranks is ready within
// TargetS seconds on a 2-core machine. Reported, never asserted.
const (
	TargetNProc = 64
	TargetS     = 3.0
)

// poll is how often the bench looks for the ready file: the figures are
// late by up to this much.
const poll = 5 * time.Millisecond

// Options configure Run. Errors of Validate name the tpcoord flag.
type Options struct {
	Self    string        // the tpcoord binary to run launch from
	NProc   []int         // --nproc: world sizes
	Runs    int           // --runs: jobs started per world size, interleaved
	Args    []string      // launch flags after --nproc (none: launch's defaults)
	JSON    bool          // --json: JSON lines instead of a table
	Timeout time.Duration // --timeout: per job
}

// Validate checks o; its errors name the flag.
func (o Options) Validate() error {
	if len(o.NProc) == 0 {
		return errors.New("--nproc: give at least one world size")
	}
	for _, n := range o.NProc {
		if n < 1 || n > launch.MaxProcs {
			return fmt.Errorf("--nproc: %d is outside 1..%d", n, launch.MaxProcs)
		}
	}
	for _, a := range o.Args {
		for _, own := range []string{"--nproc", "--job", "--ready-file"} {
			if a == own || strings.HasPrefix(a, own+"=") {
				return fmt.Errorf("launch flags: %s is the bench's own; leave it out", own)
			}
		}
	}
	switch {
	case o.Runs < 1 || o.Runs > 100:
		return fmt.Errorf("--runs: must be in [1, 100], got %d", o.Runs)
	case o.Timeout <= 0:
		return fmt.Errorf("--timeout: must be > 0, got %v", o.Timeout)
	}
	return nil
}

// Run starts o.Runs jobs of every world size, the sizes interleaved within
// each round, and writes one line per size: a table or JSON lines.
// Progress goes to progress.
func Run(ctx context.Context, o Options, stdout, progress io.Writer) error {
	if err := o.Validate(); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "tpcoord-bench-launch-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	runs := make([][]Sample, len(o.NProc))
	for r := range o.Runs {
		for i, n := range o.NProc {
			s, err := measure(ctx, o, n, filepath.Join(dir, fmt.Sprintf("%d-%d", r, i)))
			if err != nil {
				return fmt.Errorf("nproc %d, run %d: %w", n, r+1, err)
			}
			fmt.Fprintf(progress, "bench launch: run %d/%d, nproc %d: ready in %.3f s, CPU %.2f s (load %.2f before)\n",
				r+1, o.Runs, n, s.ReadyS, s.CPUS, s.Load1)
			runs[i] = append(runs[i], s)
		}
	}
	m := stats.ThisMachine()
	if !o.JSON {
		fmt.Fprintf(stdout, "machine: %s, %d cores, %s; %d runs per size, interleaved\n", m.CPU, m.Cores, m.Go, o.Runs)
		fmt.Fprintf(stdout, "%5s %9s %9s %9s %9s %12s %12s  %s\n", "nproc", "ready_p50", "ready_min", "ready_max", "cpu_p50", "cpu/proc_ms", "faults/proc", "target")
	}
	for i, n := range o.NProc {
		res := summarize(n, runs[i])
		res.Machine = m
		if err := printResult(stdout, res, o.JSON); err != nil {
			return err
		}
	}
	return nil
}

// measure starts one job of n ranks, waits for its ready file, reads what
// the job's processes used so far, and stops it.
func measure(ctx context.Context, o Options, n int, dir string) (Sample, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Sample{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	load := loadAvg()
	j, err := job.Start(ctx, job.Launch{Self: o.Self, Dir: dir, Name: "launch", Plain: true, Poll: poll,
		Args: append([]string{"--nproc", strconv.Itoa(n), "--job", "bench-launch"}, o.Args...)})
	if err != nil {
		return Sample{}, err
	}
	s := Sample{ReadyS: j.TimeToReady().Seconds(), Load1: load}
	pids := append([]int{j.PID()}, j.Ready().PIDs...)
	u, err := usage(pids)
	if err != nil {
		return Sample{}, j.Fail(fmt.Errorf("read /proc: %w", err))
	}
	if err := j.Stop(); err != nil {
		return Sample{}, fmt.Errorf("stop: %w", err)
	}
	s.CPUS, s.Procs = u.cpu.Seconds(), len(pids)
	s.FaultsPerProc = float64(u.minflt) / float64(len(pids))
	return s, nil
}

// Sample is one job's start.
type Sample struct {
	ReadyS        float64 `json:"ready_s"`
	CPUS          float64 `json:"cpu_s"` // user + system of launch and its ranks at readiness, and of the children launch has reaped
	Procs         int     `json:"procs"` // launch and its ranks
	FaultsPerProc float64 `json:"faults_per_proc"`
	Load1         float64 `json:"load1_before"` // the host's 1-minute load average before the start
}

// Result is one JSON line of `tpcoord bench launch`: one world size.
type Result struct {
	stats.Machine
	NProc            int      `json:"nproc"`
	Runs             []Sample `json:"runs"`
	ReadyP50S        float64  `json:"ready_p50_s"`
	CPUP50S          float64  `json:"cpu_p50_s"`
	CPUPerProcP50MS  float64  `json:"cpu_per_proc_p50_ms"`
	FaultsPerProcP50 float64  `json:"faults_per_proc_p50"`
	// The target applies to TargetNProc ranks only; absent on other lines.
	TargetS   float64 `json:"target_s,omitempty"`
	TargetMet *bool   `json:"target_met,omitempty"`
}

func summarize(n int, runs []Sample) Result {
	col := func(f func(Sample) float64) []float64 {
		v := make([]float64, len(runs))
		for i, s := range runs {
			v[i] = f(s)
		}
		return v
	}
	r := Result{NProc: n, Runs: runs,
		ReadyP50S:        stats.Quantile(col(func(s Sample) float64 { return s.ReadyS }), 0.5),
		CPUP50S:          stats.Quantile(col(func(s Sample) float64 { return s.CPUS }), 0.5),
		CPUPerProcP50MS:  stats.Quantile(col(func(s Sample) float64 { return 1000 * s.CPUS / float64(max(1, s.Procs)) }), 0.5),
		FaultsPerProcP50: stats.Quantile(col(func(s Sample) float64 { return s.FaultsPerProc }), 0.5),
	}
	if n == TargetNProc {
		met := r.ReadyP50S <= TargetS
		r.TargetS, r.TargetMet = TargetS, &met
	}
	return r
}

func printResult(w io.Writer, r Result, asJSON bool) error {
	if asJSON {
		return stats.WriteJSONLine(w, r)
	}
	ready := make([]float64, len(r.Runs))
	for i, s := range r.Runs {
		ready[i] = s.ReadyS
	}
	target := ""
	if r.TargetMet != nil {
		target = fmt.Sprintf("<= %.1f s: %v", r.TargetS, *r.TargetMet)
	}
	_, err := fmt.Fprintf(w, "%5d %9.3f %9.3f %9.3f %9.2f %12.1f %12.0f  %s\n", r.NProc, r.ReadyP50S,
		slices.Min(ready), slices.Max(ready), r.CPUP50S, r.CPUPerProcP50MS, r.FaultsPerProcP50, target)
	return err
}
