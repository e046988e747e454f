package sampler

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/tpcoord/tpcoord/internal/bench/stats"
	"github.com/tpcoord/tpcoord/noisepool"
	"github.com/tpcoord/tpcoord/sampler"
)

// Options configure Run: every combination of the listed values is one
// case. Errors of Validate name the tpcoord flag.
type Options struct {
	Vocab  []int    // --vocab: vocabulary sizes
	Batch  []int    // --batch: batch sizes
	Modes  []string // --mode: sampler.ModeParams names
	Impls  []string // --impl: fast, reference
	Noises []string // --noise: pool, bound, inline (the fast sampler's noise source)
	Iters  int      // --iters: timed calls per case
	JSON   bool     // --json: JSON lines instead of a table
}

// Validate checks o; its errors name the flag.
func (o Options) Validate() error {
	if o.Iters <= 0 {
		return fmt.Errorf("--iters: must be > 0, got %d", o.Iters)
	}
	for _, v := range o.Vocab {
		if v <= 0 {
			return fmt.Errorf("--vocab: must be > 0, got %d", v)
		}
	}
	for _, b := range o.Batch {
		if b <= 0 {
			return fmt.Errorf("--batch: must be > 0, got %d", b)
		}
	}
	for _, m := range o.Modes {
		if _, err := sampler.ModeParams(m); err != nil {
			return fmt.Errorf("--mode: %w", err)
		}
	}
	for _, i := range o.Impls {
		if i != "fast" && i != "reference" {
			return fmt.Errorf("--impl: unknown %q (want fast or reference)", i)
		}
	}
	for _, n := range o.Noises {
		if n != "pool" && n != "bound" && n != "inline" {
			return fmt.Errorf("--noise: unknown %q (want pool, bound or inline)", n)
		}
	}
	return nil
}

// Result is one JSON line of `tpcoord bench sampler`: one case, times of
// one Sample call.
type Result struct {
	Impl     string  `json:"impl"`
	Noise    string  `json:"noise"`
	Mode     string  `json:"mode"`
	Vocab    int     `json:"vocab"`
	Batch    int     `json:"batch"`
	Iters    int     `json:"iters"`
	MedianMS float64 `json:"median_ms"`
	P90MS    float64 `json:"p90_ms"`
	P99MS    float64 `json:"p99_ms"`
	stats.Machine
}

// benchCase is one combination of o's lists.
type benchCase struct {
	vocab, batch      int
	impl, noise, mode string
}

// cases lists o's combinations, in the order they are printed.
func (o Options) cases() []benchCase {
	var out []benchCase
	for _, vocab := range o.Vocab {
		for _, batch := range o.Batch {
			for _, impl := range o.Impls {
				for _, noise := range o.Noises {
					for _, mode := range o.Modes {
						out = append(out, benchCase{vocab, batch, impl, noise, mode})
					}
				}
			}
		}
	}
	return out
}

// Run times every case of o and writes one line per case to stdout, a
// table or JSON lines.
func Run(ctx context.Context, o Options, stdout io.Writer) error {
	if err := o.Validate(); err != nil {
		return err
	}
	m := stats.ThisMachine()
	for _, c := range o.cases() {
		if err := ctx.Err(); err != nil {
			return err
		}
		r := c.run(o.Iters)
		r.Machine = m
		if err := printResult(stdout, r, o.JSON); err != nil {
			return err
		}
	}
	return nil
}

// run times iters calls after one that warms the scratch buffers.
func (c benchCase) run(iters int) Result {
	rows, pool := c.rows(iters)
	cfg := sampler.DefaultConfig()
	cfg.Vocab, cfg.CheckParams = c.vocab, false
	var s interface {
		Sample([]sampler.Row, []sampler.Result)
	} = sampler.New(cfg)
	if c.impl == "reference" {
		s = sampler.NewReference(cfg)
	}
	out := make([]sampler.Result, c.batch)
	times := make([]time.Duration, 0, iters)
	for it := range iters + 1 {
		for j := range rows {
			rows[j].NoiseRow = uint64(it)
			if pool != nil { // pool row i is (key i%batch+1, row i/batch)
				i := (it*c.batch + j) % len(pool)
				rows[j].Noise, rows[j].NoiseBlockMax = pool[i].values, pool[i].blockMax
				rows[j].NoiseRow, rows[j].NoiseBound = uint64(i/c.batch), c.noise == "bound"
			}
		}
		t0 := time.Now()
		s.Sample(rows, out)
		if it > 0 {
			times = append(times, time.Since(t0))
		}
	}
	slices.Sort(times)
	ms := func(q float64) float64 { return float64(stats.Nearest(times, q).Nanoseconds()) / 1e6 }
	nz := c.noise
	if c.impl == "reference" {
		nz = "inline"
	}
	return Result{Impl: c.impl, Noise: nz, Mode: c.mode, Vocab: c.vocab, Batch: c.batch, Iters: iters,
		MedianMS: ms(0.50), P90MS: ms(0.90), P99MS: ms(0.99)}
}

// rows are the case's batch of synthetic rows and, for the fast sampler
// with pool noise, its noise rows: filled before timing, one per (row,
// iteration), as a warm pool hands out distinct rows, and reused
// round-robin when that would exceed ~256 MB.
func (c benchCase) rows(iters int) ([]sampler.Row, []poolRow) {
	p, _ := sampler.ModeParams(c.mode) // Validate checked the mode
	rows := make([]sampler.Row, c.batch)
	for i := range rows {
		rows[i] = sampler.Row{Logits: sampler.SyntheticLogits(c.vocab, uint64(i)), Params: &p, EOS: -1, NoiseKey: uint64(i + 1)}
	}
	if c.noise == "inline" || c.impl != "fast" {
		return rows, nil
	}
	n := min(c.batch*(iters+1), max(c.batch, (256<<20)/(4*c.vocab)))
	pool := make([]poolRow, n/c.batch*c.batch) // whole batches: row i is (key i%batch+1, row i/batch)
	fill := noisepool.FillRow
	if c.noise == "bound" {
		fill = noisepool.FillBoundRow
	}
	for i := range pool {
		r := poolRow{make([]float32, c.vocab), make([]float32, noisepool.BlockCount(c.vocab))}
		fill(uint64(i%c.batch+1), uint64(i/c.batch), r.values)
		noisepool.FillBlockMax(r.values, r.blockMax)
		pool[i] = r
	}
	return rows, pool
}

// poolRow is a noise row as the pool hands it out: values and block maxima.
type poolRow struct {
	values, blockMax []float32
}

func printResult(w io.Writer, r Result, asJSON bool) error {
	if asJSON {
		return stats.WriteJSONLine(w, r)
	}
	_, err := fmt.Fprintf(w, "%-9s %-6s %-9s vocab %-6d batch %-3d median %8.3f ms  p90 %8.3f ms  (%s, %d cores, %s)\n",
		r.Impl, r.Noise, r.Mode, r.Vocab, r.Batch, r.MedianMS, r.P90MS, r.CPU, r.Cores, r.Go)
	return err
}
