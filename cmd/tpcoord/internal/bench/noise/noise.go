package noise

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"time"

	"github.com/tpcoord/tpcoord/cmd/tpcoord/internal/bench/stats"
	"github.com/tpcoord/tpcoord/noisepool"
)

// TakeRows is the batch a warm-pool take is timed for.
const TakeRows = 32

// targetNsPerValue is the project's target for noise generation, per core;
// reported, never asserted.
const targetNsPerValue = 0.5

// Options configure Run. Errors of Validate name the tpcoord flag.
type Options struct {
	Vocab     int   // --vocab: values per row
	Rows      int   // --rows: rows per goroutine and iteration
	Producers []int // --producers: goroutine counts for fillrow
	Iters     int   // --iters: timed iterations per case
	JSON      bool  // --json: JSON lines instead of a table
}

// Validate checks o; its errors name the flag.
func (o Options) Validate() error {
	switch {
	case o.Vocab < 1 || o.Vocab > 1<<24:
		return fmt.Errorf("--vocab: must be in [1, %d], got %d", 1<<24, o.Vocab)
	case o.Rows < 1:
		return fmt.Errorf("--rows: must be >= 1, got %d", o.Rows)
	case o.Iters < 1:
		return fmt.Errorf("--iters: must be >= 1, got %d", o.Iters)
	case len(o.Producers) == 0:
		return errors.New("--producers: give at least one count")
	}
	for _, p := range o.Producers {
		if p < 1 || p > 256 {
			return fmt.Errorf("--producers: %d is outside 1..256", p)
		}
	}
	return nil
}

// Result is one JSON line of `tpcoord bench noise`: one case. For the
// value-generating cases a sample is one iteration (every goroutine fills
// --rows rows) and the statistics are ns per value per core: the
// iteration's wall time × goroutines / values generated. For pool_take32 a
// sample is the time to take 32 rows from a warm pool, in µs.
type Result struct {
	Case      string  `json:"case"` // fillrow, scalar_go, mathlog, pool_take32
	Producers int     `json:"producers"`
	Vocab     int     `json:"vocab"`
	Rows      int     `json:"rows"` // rows per goroutine and sample (32 for pool_take32)
	Iters     int     `json:"iters"`
	Unit      string  `json:"unit"` // ns_per_value_per_core or us_per_take
	Median    float64 `json:"median"`
	P90       float64 `json:"p90"`
	P99       float64 `json:"p99"`
	// VsMathlog is the median over the math.Log baseline's median measured
	// in the same run (value cases with one goroutine only).
	VsMathlog float64 `json:"vs_mathlog,omitempty"`
	// TargetNsPerValue is the per-core target (value cases only).
	TargetNsPerValue float64 `json:"target_ns_per_value,omitempty"`
	Inline           int     `json:"inline,omitempty"` // pool_take32: rows the warm pool did not have ready
	stats.Machine
}

// Run runs every case of o and writes one line per case to stdout, a
// table or JSON lines, and its progress to progress.
func Run(ctx context.Context, o Options, stdout, progress io.Writer) error {
	if err := o.Validate(); err != nil {
		return err
	}
	m := stats.ThisMachine()
	if !o.JSON {
		fmt.Fprintf(stdout, "machine: %s, %d cores, %s; vocab %d, %d rows per goroutine and iteration, %d iterations\n",
			m.CPU, m.Cores, m.Go, o.Vocab, o.Rows, o.Iters)
		fmt.Fprintf(stdout, "%-12s %9s %-22s %10s %10s %10s %11s\n", "case", "producers", "unit", "median", "p90", "p99", "vs_mathlog")
	}
	emit := func(r Result) error {
		r.Machine = m
		return printResult(stdout, r, o.JSON)
	}
	results, err := valueCases(ctx, o, progress)
	if err != nil {
		return err
	}
	for _, r := range results {
		if err := emit(r); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	fmt.Fprintf(progress, "bench noise: pool_take32 ...\n")
	r, err := poolTake(ctx, o)
	if err != nil {
		return fmt.Errorf("pool_take32: %w", err)
	}
	return emit(r)
}

// valueCases times the value-generating cases, in their order of output:
// fillrow for every producer count, scalar_go, mathlog. The baseline
// (mathlog) runs first so that every one-goroutine case is compared to it.
func valueCases(ctx context.Context, o Options, progress io.Writer) ([]Result, error) {
	fmt.Fprintf(progress, "bench noise: mathlog ...\n")
	base := valueCase(o, "mathlog", 1, mathLogRow)
	var results []Result
	for _, p := range o.Producers {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		fmt.Fprintf(progress, "bench noise: fillrow, %d goroutines ...\n", p)
		results = append(results, valueCase(o, "fillrow", p, noisepool.FillRow))
	}
	fmt.Fprintf(progress, "bench noise: scalar_go ...\n")
	results = append(results, valueCase(o, "scalar_go", 1, scalarRow), base)
	for i, r := range results {
		if r.Producers == 1 && base.Median > 0 {
			results[i].VsMathlog = r.Median / base.Median
		}
	}
	return results, nil
}

// scalarRow fills dst through the exported scalar stages.
func scalarRow(key, row uint64, dst []float32) {
	seed := noisepool.RowSeed(key, row)
	for i := range dst {
		dst[i] = noisepool.GumbelFromBits(noisepool.Bits(seed, i))
	}
}

// mathLogRow is the naive baseline: the same bits, U = (b+0.5)/2^32,
// G = -log(-log(U)) in float64 math.Log.
func mathLogRow(key, row uint64, dst []float32) {
	seed := noisepool.RowSeed(key, row)
	for i := range dst {
		u := (float64(noisepool.Bits(seed, i)) + 0.5) * (1.0 / (1 << 32))
		dst[i] = float32(-math.Log(-math.Log(u)))
	}
}

// valueCase times fill with p goroutines, each filling o.Rows rows per
// iteration into its own buffer; one untimed iteration warms up.
func valueCase(o Options, name string, p int, fill func(key, row uint64, dst []float32)) Result {
	bufs := make([][]float32, p)
	for g := range bufs {
		bufs[g] = make([]float32, o.Vocab)
	}
	samples := make([]float64, 0, o.Iters)
	values := float64(o.Rows) * float64(o.Vocab) // per goroutine
	for it := range o.Iters + 1 {
		var wg sync.WaitGroup
		t0 := time.Now()
		for g := range p {
			wg.Go(func() {
				for r := range o.Rows {
					fill(uint64(g+1), uint64(it*o.Rows+r), bufs[g])
				}
			})
		}
		wg.Wait()
		if it > 0 {
			// wall × p / (p × values) = wall / values per goroutine.
			samples = append(samples, float64(time.Since(t0).Nanoseconds())/values)
		}
	}
	med, p90, p99 := stats.Quantiles(samples)
	r := Result{Case: name, Producers: p, Vocab: o.Vocab, Rows: o.Rows, Iters: o.Iters,
		Unit: "ns_per_value_per_core", Median: med, P90: p90, P99: p99}
	if name != "mathlog" {
		r.TargetNsPerValue = targetNsPerValue
	}
	return r
}

func printResult(w io.Writer, r Result, asJSON bool) error {
	if asJSON {
		return stats.WriteJSONLine(w, r)
	}
	vs := "-"
	if r.VsMathlog > 0 {
		vs = fmt.Sprintf("%.3f", r.VsMathlog)
	}
	_, err := fmt.Fprintf(w, "%-12s %9d %-22s %10.3f %10.3f %10.3f %11s\n",
		r.Case, r.Producers, r.Unit, r.Median, r.P90, r.P99, vs)
	return err
}
