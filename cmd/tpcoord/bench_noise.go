package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/tpcoord/tpcoord/noisepool"
)

// bnTakeRows is the batch a warm-pool take is timed for.
const bnTakeRows = 32

// bnTargetNsPerValue is DESIGN.md's target for noise generation, per core;
// reported, never asserted.
const bnTargetNsPerValue = 0.5

type benchNoiseOptions struct {
	vocab     int
	rows      int
	producers []int
	iters     int
	json      bool
}

// benchNoiseResult is one JSON line of `tpcoord bench noise`: one case.
// For the value-generating cases a sample is one iteration (every goroutine
// fills --rows rows) and the statistics are ns per value per core: the
// iteration's wall time × goroutines / values generated. For pool_take32 a
// sample is the time to take 32 rows from a warm pool, in µs.
type benchNoiseResult struct {
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
	CPU              string  `json:"cpu"`
	Cores            int     `json:"cores"`
	Go               string  `json:"go"`
}

func newBenchNoiseCmd() *cobra.Command {
	var o benchNoiseOptions
	cmd := &cobra.Command{
		Use:   "noise",
		Short: "Time Gumbel noise generation (noisepool.FillRow, scalar Go, math.Log) and warm-pool takes",
		Long: `Times, in one run:

  fillrow      noisepool.FillRow (the AVX-512 kernel where the CPU has it,
               else the portable block kernel) with P goroutines at once,
               for every P of --producers;
  scalar_go    the exported scalar path GumbelFromBits(Bits(seed, i)), one
               goroutine (the portable block kernel is not exported);
  mathlog      the naive baseline -log(-log(u)) with math.Log on the same
               bits, one goroutine;
  pool_take32  taking 32 rows (one per stream) from a warm noisepool.Pool,
               then releasing them (not timed) and waiting for the
               producers to refill (not timed).

Value cases report ns per value per core (an iteration's wall time × P /
values) with median, p90 and p99 over --iters iterations of --rows rows per
goroutine. One JSON line per case with --json, a table otherwise; progress
on stderr.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.validate(); err != nil {
				return err
			}
			return runBenchNoise(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), o)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.vocab, "vocab", 100352, "values per row")
	f.IntVar(&o.rows, "rows", 64, "rows per goroutine and iteration")
	f.IntSliceVar(&o.producers, "producers", []int{1, 2}, "goroutine counts for fillrow, comma-separated")
	f.IntVar(&o.iters, "iters", 20, "timed iterations per case")
	f.BoolVar(&o.json, "json", false, "print one JSON object per line")
	return cmd
}

func (o benchNoiseOptions) validate() error {
	switch {
	case o.vocab < 1 || o.vocab > 1<<24:
		return configError("--vocab: must be in [1, %d], got %d", 1<<24, o.vocab)
	case o.rows < 1:
		return configError("--rows: must be >= 1, got %d", o.rows)
	case o.iters < 1:
		return configError("--iters: must be >= 1, got %d", o.iters)
	case len(o.producers) == 0:
		return configError("--producers: give at least one count")
	}
	for _, p := range o.producers {
		if p < 1 || p > 256 {
			return configError("--producers: %d is outside 1..256", p)
		}
	}
	return nil
}

func runBenchNoise(ctx context.Context, w, progress io.Writer, o benchNoiseOptions) error {
	cpu, cores, gover := cpuModel(), runtime.NumCPU(), runtime.Version()
	if !o.json {
		fmt.Fprintf(w, "machine: %s, %d cores, %s; vocab %d, %d rows per goroutine and iteration, %d iterations\n",
			cpu, cores, gover, o.vocab, o.rows, o.iters)
		fmt.Fprintf(w, "%-12s %9s %-22s %10s %10s %10s %11s\n", "case", "producers", "unit", "median", "p90", "p99", "vs_mathlog")
	}
	emit := func(r benchNoiseResult) error {
		r.CPU, r.Cores, r.Go = cpu, cores, gover
		return printBenchNoise(w, r, o.json)
	}
	// The baseline runs first so that every value case can be compared to it.
	fmt.Fprintf(progress, "bench noise: mathlog ...\n")
	base := bnValueCase(o, "mathlog", 1, bnMathLogRow)
	var results []benchNoiseResult
	for _, p := range o.producers {
		if err := ctx.Err(); err != nil {
			return err
		}
		fmt.Fprintf(progress, "bench noise: fillrow, %d goroutines ...\n", p)
		results = append(results, bnValueCase(o, "fillrow", p, noisepool.FillRow))
	}
	fmt.Fprintf(progress, "bench noise: scalar_go ...\n")
	results = append(results, bnValueCase(o, "scalar_go", 1, bnScalarRow), base)
	for _, r := range results {
		if r.Producers == 1 && base.Median > 0 {
			r.VsMathlog = r.Median / base.Median
		}
		if err := emit(r); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	fmt.Fprintf(progress, "bench noise: pool_take32 ...\n")
	r, err := bnPoolTake(ctx, o)
	if err != nil {
		return fmt.Errorf("pool_take32: %w", err)
	}
	return emit(r)
}

// bnScalarRow fills dst through the exported scalar stages.
func bnScalarRow(key, row uint64, dst []float32) {
	seed := noisepool.RowSeed(key, row)
	for i := range dst {
		dst[i] = noisepool.GumbelFromBits(noisepool.Bits(seed, i))
	}
}

// bnMathLogRow is the naive baseline: the same bits, U = (b+0.5)/2^32,
// G = -log(-log(U)) in float64 math.Log.
func bnMathLogRow(key, row uint64, dst []float32) {
	seed := noisepool.RowSeed(key, row)
	for i := range dst {
		u := (float64(noisepool.Bits(seed, i)) + 0.5) * (1.0 / (1 << 32))
		dst[i] = float32(-math.Log(-math.Log(u)))
	}
}

// bnValueCase times fill with p goroutines, each filling o.rows rows per
// iteration into its own buffer; one untimed iteration warms up.
func bnValueCase(o benchNoiseOptions, name string, p int, fill func(key, row uint64, dst []float32)) benchNoiseResult {
	bufs := make([][]float32, p)
	for g := range bufs {
		bufs[g] = make([]float32, o.vocab)
	}
	samples := make([]float64, 0, o.iters)
	values := float64(o.rows) * float64(o.vocab) // per goroutine
	for it := range o.iters + 1 {
		var wg sync.WaitGroup
		t0 := time.Now()
		for g := range p {
			wg.Go(func() {
				for r := range o.rows {
					fill(uint64(g+1), uint64(it*o.rows+r), bufs[g])
				}
			})
		}
		wg.Wait()
		if it > 0 {
			// wall × p / (p × values) = wall / values per goroutine.
			samples = append(samples, float64(time.Since(t0).Nanoseconds())/values)
		}
	}
	med, p90, p99 := bnStats(samples)
	r := benchNoiseResult{Case: name, Producers: p, Vocab: o.vocab, Rows: o.rows, Iters: o.iters,
		Unit: "ns_per_value_per_core", Median: med, P90: p90, P99: p99}
	if name != "mathlog" {
		r.TargetNsPerValue = bnTargetNsPerValue
	}
	return r
}

// bnPoolTake times taking bnTakeRows rows, one per active stream, from a
// pool whose producers had time to fill every row ahead (Warm).
func bnPoolTake(ctx context.Context, o benchNoiseOptions) (benchNoiseResult, error) {
	cfg := noisepool.DefaultConfig()
	cfg.Vocab = o.vocab
	cfg.Rows = bnTakeRows * (cfg.Lookahead + 2)
	cfg.Producers = max(1, min(runtime.NumCPU()-1, 2))
	cfg.MaxBytes = max(cfg.MaxBytes, cfg.Bytes())
	pool, err := noisepool.New(cfg)
	if err != nil {
		return benchNoiseResult{}, err
	}
	defer pool.Close()
	for k := range bnTakeRows {
		pool.Activate(uint64(k+1), 0)
	}
	rows := make([]noisepool.Row, bnTakeRows)
	samples := make([]float64, 0, o.iters)
	inline := 0
	for it := range o.iters + 1 {
		if err := pool.Warm(ctx); err != nil {
			return benchNoiseResult{}, err
		}
		t0 := time.Now()
		for k := range rows {
			if rows[k], err = pool.Take(uint64(k+1), uint64(it)); err != nil {
				return benchNoiseResult{}, err
			}
		}
		d := time.Since(t0)
		for _, r := range rows {
			if it > 0 && r.Inline {
				inline++
			}
			if err := pool.Release(r); err != nil {
				return benchNoiseResult{}, err
			}
		}
		if it > 0 {
			samples = append(samples, float64(d.Nanoseconds())/1e3)
		}
	}
	med, p90, p99 := bnStats(samples)
	return benchNoiseResult{Case: "pool_take32", Producers: cfg.Producers, Vocab: o.vocab, Rows: bnTakeRows,
		Iters: o.iters, Unit: "us_per_take", Median: med, P90: p90, P99: p99, Inline: inline}, nil
}

// bnStats returns the nearest-rank median, p90 and p99.
func bnStats(v []float64) (med, p90, p99 float64) {
	s := slices.Clone(v)
	slices.Sort(s)
	q := func(f float64) float64 {
		i := int(math.Ceil(f*float64(len(s)))) - 1
		return s[min(max(i, 0), len(s)-1)]
	}
	return q(0.5), q(0.9), q(0.99)
}

func printBenchNoise(w io.Writer, r benchNoiseResult, asJSON bool) error {
	if asJSON {
		return writeJSONLine(w, r)
	}
	vs := "-"
	if r.VsMathlog > 0 {
		vs = fmt.Sprintf("%.3f", r.VsMathlog)
	}
	_, err := fmt.Fprintf(w, "%-12s %9d %-22s %10.3f %10.3f %10.3f %11s\n",
		r.Case, r.Producers, r.Unit, r.Median, r.P90, r.P99, vs)
	return err
}
