package main

import (
	"fmt"
	"image/color"
	"sort"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// The portable-path figures of docs/bench/results/2026-12-02-pool: bench
// "pool-e2e" is `tpcoord bench e2e` lines with the build ("purego" or
// "avx512") and the pool's row form (noise_form_env) added; bench
// "plain-greedy" is `tpcoord bench sampler --mode plain,greedy` lines
// with the run number added.

type poolKey struct{ build, form string }

// poolE2E writes the table of tokens/s and inline rows per build and
// form, and pool-e2e.png.
func (g *gen) poolE2E(recs []record) error {
	tps, inline := map[poolKey][]float64{}, map[poolKey][]float64{}
	var keys []poolKey
	for _, r := range recs {
		k := poolKey{r.str("build"), r.str("noise_form_env")}
		if _, ok := tps[k]; !ok {
			keys = append(keys, k)
		}
		v, _ := r.num("output_tokens_per_s")
		tps[k] = append(tps[k], v)
		if np, ok := r.vals["noise_pool"].(map[string]any); ok {
			n, _ := np["rows_inline"].(float64)
			inline[k] = append(inline[k], n)
		}
	}
	if len(keys) == 0 {
		return fmt.Errorf("pool-e2e: no lines")
	}
	g.p("### The pool on each build: output tokens/s and rows made inline\n\n")
	g.p("| build | rows | output tokens/s (runs) | median | rows made inline (runs) |\n|---|---|---|---|---|\n")
	var vals plotter.Values
	var labels []string
	for _, k := range keys {
		g.p("| %s | %s | %s | %.0f | %s |\n", k.build, k.form, joinNums(tps[k], "%.0f"), median(tps[k]), joinNums(inline[k], "%.0f"))
		vals = append(vals, median(tps[k]))
		labels = append(labels, k.build+"\n"+k.form)
	}
	g.p("\n")
	p := plot.New()
	p.Title.Text = "TP 4, batch 32, 20 ms forward: output tokens/s (median of runs)"
	p.Y.Label.Text = "output tokens/s"
	bars, err := plotter.NewBarChart(vals, vg.Points(30))
	if err != nil {
		return err
	}
	bars.Color, bars.LineStyle.Width = color.RGBA{R: 0x1f, G: 0x6f, B: 0xb4, A: 0xff}, 0
	p.Add(bars)
	// The forward-bound ceiling: every step a batch of tokens, each 20 ms.
	if c, ok := recs[0].num("forward_time_ms"); ok && c > 0 {
		b, _ := recs[0].num("batch")
		ceil := b * 1000 / c
		line, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: ceil}, {X: float64(len(vals)) - 0.5, Y: ceil}})
		if err != nil {
			return err
		}
		line.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(line)
		p.Legend.Add(fmt.Sprintf("forward-bound ceiling, %.0f tokens/s", ceil), line)
		p.Legend.Top, p.Legend.Left = true, true
		p.Y.Max = 1.15 * max(ceil, slicesMax(vals))
	}
	p.Y.Min = 0
	p.X.Min, p.X.Max = -0.5, float64(len(vals))-0.5
	p.NominalX(labels...)
	if err := g.save(p, "pool-e2e.png"); err != nil {
		return err
	}
	g.link("pool-e2e.png", "output tokens/s per build and noise row form")
	return nil
}

// plainGreedy writes the per-run table of plain and greedy medians and
// plain-greedy.png.
func (g *gen) plainGreedy(recs []record) error {
	ms := map[int]map[string]float64{}
	for _, r := range recs {
		run, _ := r.num("run")
		v, _ := r.num("median_ms")
		if ms[int(run)] == nil {
			ms[int(run)] = map[string]float64{}
		}
		ms[int(run)][r.str("mode")] = v
	}
	var runs []int
	for run, m := range ms {
		if m["plain"] > 0 && m["greedy"] > 0 {
			runs = append(runs, run)
		}
	}
	if len(runs) == 0 {
		return fmt.Errorf("plain-greedy: no run has both modes")
	}
	sort.Ints(runs)
	g.p("### Plain sampling against greedy argmax, batch 32, per run\n\n| run | plain ms | greedy ms | plain / greedy |\n|---|---|---|---|\n")
	plain, greedy, ratios := plotter.Values{}, plotter.Values{}, []float64{}
	for _, run := range runs {
		m := ms[run]
		g.p("| %d | %.3f | %.3f | %.2f |\n", run, m["plain"], m["greedy"], m["plain"]/m["greedy"])
		plain, greedy = append(plain, m["plain"]), append(greedy, m["greedy"])
		ratios = append(ratios, m["plain"]/m["greedy"])
	}
	g.p("\nMedian ratio %.2f.\n\n", median(ratios))
	p, err := plainGreedyPlot(runs, plain, greedy, median(ratios))
	if err != nil {
		return err
	}
	if err := g.save(p, "plain-greedy.png"); err != nil {
		return err
	}
	g.link("plain-greedy.png", "plain sampling against greedy argmax, per run")
	return nil
}

// plainGreedyPlot draws each run's plain and greedy medians side by side.
func plainGreedyPlot(runs []int, plain, greedy plotter.Values, ratio float64) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("batch 32, vocab 100352, pool rows: plain / greedy, median %.2f×", ratio)
	p.Y.Label.Text = "ms per call (median of the run)"
	p.Y.Min = 0
	w := vg.Points(14)
	for i, s := range []struct {
		name string
		v    plotter.Values
		c    color.Color
	}{
		{"plain (T = 0.8)", plain, color.RGBA{R: 0xd6, G: 0x60, B: 0x1f, A: 0xff}},
		{"greedy argmax", greedy, color.RGBA{R: 0x1f, G: 0x6f, B: 0xb4, A: 0xff}},
	} {
		b, err := plotter.NewBarChart(s.v, w)
		if err != nil {
			return nil, err
		}
		b.Color, b.LineStyle.Width, b.Offset = s.c, 0, w*vg.Length(2*i-1)/2
		p.Add(b)
		p.Legend.Add(s.name, b)
	}
	p.Legend.Top = true
	p.Y.Max = 1.3 * max(slicesMax(plain), slicesMax(greedy))
	p.X.Min, p.X.Max = -0.5, float64(len(runs))-0.5
	names := make([]string, len(runs))
	for i, run := range runs {
		names[i] = fmt.Sprintf("run %d", run)
	}
	p.NominalX(names...)
	return p, nil
}

// joinNums formats v with f, separated by " / ".
func joinNums(v []float64, f string) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprintf(f, x)
	}
	return strings.Join(s, " / ")
}

// slicesMax is the largest of v (0 for none).
func slicesMax(v plotter.Values) float64 {
	m := 0.0
	for _, x := range v {
		m = max(m, x)
	}
	return m
}
