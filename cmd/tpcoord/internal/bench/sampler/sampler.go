package sampler

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/tpcoord/tpcoord/cmd/tpcoord/internal/bench/stats"
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
// table or JSON lines. The modes of one vocab, batch, implementation and
// noise source are timed interleaved, a call of each in turn, so that
// their ratios (plain against greedy) are not moved by the machine's
// drift between one case and the next.
func Run(ctx context.Context, o Options, stdout io.Writer) error {
	if err := o.Validate(); err != nil {
		return err
	}
	m := stats.ThisMachine()
	cs := o.cases()
	for len(cs) > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		n := groupLen(cs)
		for _, r := range runGroup(cs[:n], o.Iters) {
			r.Machine = m
			if err := printResult(stdout, r, o.JSON); err != nil {
				return err
			}
		}
		cs = cs[n:]
	}
	return nil
}

// groupLen is the number of leading cases of cs that differ only in mode.
func groupLen(cs []benchCase) int {
	n := 1
	for n < len(cs) {
		a, b := cs[0], cs[n]
		if a.vocab != b.vocab || a.batch != b.batch || a.impl != b.impl || a.noise != b.noise {
			break
		}
		n++
	}
	return n
}

// runGroup times iters calls of each case of g (cases that differ only in
// mode), after one call each that warms the scratch buffers. Iteration
// it times the modes in turn; each call reads pool rows no other call
// read before it until the pool (~256 MB) wraps, and after that rows read
// some 250 MB of other rows ago.
func runGroup(g []benchCase, iters int) []Result {
	c0 := g[0]
	pool := c0.poolRows((iters + 1) * len(g))
	times := make([][]time.Duration, len(g))
	samplers := make([]batchSampler, len(g))
	rows := make([][]sampler.Row, len(g))
	logits := c0.logits() // shared: each mode finds them as warm as the last left them
	for m, c := range g {
		samplers[m], rows[m] = c.newSampler(), c.rows(logits)
		times[m] = make([]time.Duration, 0, iters)
	}
	out := make([]sampler.Result, c0.batch)
	for it := range iters + 1 {
		for m := range g {
			c0.setNoise(rows[m], pool, it, callIndex(it, m, len(g)))
			t0 := time.Now()
			samplers[m].Sample(rows[m], out)
			if it > 0 {
				times[m] = append(times[m], time.Since(t0))
			}
		}
	}
	res := make([]Result, len(g))
	for m, c := range g {
		res[m] = c.result(times[m])
	}
	return res
}

// callIndex numbers the calls of a group of modes: iteration it's call of
// mode m. Call k reads the pool's k-th batch of rows (setNoise).
func callIndex(it, m, modes int) int { return it*modes + m }

// batchSampler is what Sampler and Reference have in common.
type batchSampler interface {
	Sample([]sampler.Row, []sampler.Result)
}

// newSampler is the case's implementation for its vocab.
func (c benchCase) newSampler() batchSampler {
	cfg := sampler.DefaultConfig()
	cfg.Vocab, cfg.CheckParams = c.vocab, false
	if c.impl == "reference" {
		return sampler.NewReference(cfg)
	}
	return sampler.New(cfg)
}

// setNoise points rows at iteration it's noise: the noise row number
// it, and with pool rows the k-th batch of the pool (pool row i is key
// i%batch+1, row i/batch), round-robin.
func (c benchCase) setNoise(rows []sampler.Row, pool []poolRow, it, k int) {
	for j := range rows {
		rows[j].NoiseRow = uint64(it)
		if pool != nil {
			i := (k*c.batch + j) % len(pool)
			rows[j].Noise, rows[j].NoiseBlockMax = pool[i].values, pool[i].blockMax
			rows[j].NoiseRow, rows[j].NoiseBound = uint64(i/c.batch), c.noise == "bound"
		}
	}
}

// result summarizes the case's call times.
func (c benchCase) result(times []time.Duration) Result {
	slices.Sort(times)
	ms := func(q float64) float64 { return float64(stats.Nearest(times, q).Nanoseconds()) / 1e6 }
	nz := c.noise
	if c.impl == "reference" {
		nz = "inline"
	}
	return Result{Impl: c.impl, Noise: nz, Mode: c.mode, Vocab: c.vocab, Batch: c.batch, Iters: len(times),
		MedianMS: ms(0.50), P90MS: ms(0.90), P99MS: ms(0.99)}
}

// logits are the case's batch of synthetic logits rows.
func (c benchCase) logits() [][]float32 {
	l := make([][]float32, c.batch)
	for i := range l {
		l[i] = sampler.SyntheticLogits(c.vocab, uint64(i))
	}
	return l
}

// rows are the case's batch of rows over logits, with its mode's
// parameters.
func (c benchCase) rows(logits [][]float32) []sampler.Row {
	p, _ := sampler.ModeParams(c.mode) // Validate checked the mode
	rows := make([]sampler.Row, c.batch)
	for i := range rows {
		rows[i] = sampler.Row{Logits: logits[i], Params: &p, EOS: -1, NoiseKey: uint64(i + 1)}
	}
	return rows
}

// poolRows are, for the fast sampler with pool noise, the noise rows of
// calls calls (warm-ups included): filled before timing, one per (row,
// call), as a warm pool hands out distinct rows, and reused round-robin
// when that would exceed ~256 MB. Nil for inline noise.
func (c benchCase) poolRows(calls int) []poolRow {
	if c.noise == "inline" || c.impl != "fast" {
		return nil
	}
	n := min(c.batch*calls, max(c.batch, (256<<20)/(4*c.vocab)))
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
	return pool
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
