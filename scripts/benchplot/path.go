package main

import (
	"fmt"
	"image/color"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// bench "e2e-path" is `tpcoord bench e2e` lines with a "variant" (the
// build measured) added: docs/bench/results/2026-12-02-e2e.

type pathKey struct {
	tokens  int
	variant string
}

// pathPhases are the phases of rank 0's mean step that the plot stacks,
// in the order of a step's critical path.
var pathPhases = []struct {
	key string
	c   color.Color
}{
	{"forward", color.RGBA{R: 0x9e, G: 0xc6, B: 0xe6, A: 0xff}},
	{"sample", color.RGBA{R: 0xd6, G: 0x60, B: 0x1f, A: 0xff}},
	{"publish", color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}},
	{"reply", color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff}},
}

// pathE2E writes the table of tokens/s against the forward-bound ceiling
// and rank 0's mean step per phase, for each variant and request length,
// and e2e-path.png: the mean step of each, stacked by phase.
func (g *gen) pathE2E(recs []record) error {
	tps, phase := map[pathKey][]float64{}, map[pathKey]map[string][]float64{}
	var keys []pathKey
	ceil := 0.0
	for _, r := range recs {
		if kind := r.str("kind"); kind != "" && kind != "combo" {
			continue // bench e2e's stage lines: nothing of the path
		}
		n, _ := r.num("tokens")
		k := pathKey{int(n), r.str("variant")}
		if _, ok := tps[k]; !ok {
			keys, phase[k] = append(keys, k), map[string][]float64{}
		}
		v, _ := r.num("output_tokens_per_s")
		tps[k] = append(tps[k], v)
		m, ok := r.vals["step_mean_ms"].(map[string]any)
		if !ok {
			return fmt.Errorf("e2e-path: a line of variant %q, %d tokens, has no step_mean_ms (rank 0's steps could not be read)", k.variant, k.tokens)
		}
		for _, p := range append([]string{"total"}, phaseKeys()...) {
			x, _ := m[p].(float64)
			phase[k][p] = append(phase[k][p], x)
		}
		f, _ := r.num("forward_time_ms")
		b, _ := r.num("batch")
		switch c := b * 1000 / f; {
		case f <= 0:
			return fmt.Errorf("e2e-path: a line of variant %q has no forward_time_ms", k.variant)
		case ceil != 0 && c != ceil:
			return fmt.Errorf("e2e-path: the lines differ in batch or forward time (ceilings %.0f and %.0f tokens/s)", ceil, c)
		default:
			ceil = c
		}
	}
	if len(keys) == 0 {
		return fmt.Errorf("e2e-path: no lines")
	}
	g.p("### Rank 0's critical path: output tokens/s and its mean step\n\n")
	g.p("Ceiling %.0f tokens/s (a full batch every forward time). Phases: the median over runs of each run's mean, in ms.\n\n", ceil)
	g.p("| tokens | variant | output tokens/s (runs) | median | of the ceiling | mean step | forward | sample | publish | reply |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, k := range keys {
		m := func(p string) float64 { return median(phase[k][p]) }
		g.p("| %d | %s | %s | %.0f | %.1f%% | %.2f | %.2f | %.2f | %.2f | %.2f |\n", k.tokens, k.variant, joinNums(tps[k], "%.0f"),
			median(tps[k]), 100*median(tps[k])/ceil, m("total"), m("forward"), m("sample"), m("publish"), m("reply"))
	}
	g.p("\n")
	p, err := pathPlot(keys, phase)
	if err != nil {
		return err
	}
	if err := g.save(p, "e2e-path.png"); err != nil {
		return err
	}
	g.link("e2e-path.png", "rank 0's mean step by phase, per variant and request length")
	return nil
}

func phaseKeys() []string {
	k := make([]string, len(pathPhases))
	for i, p := range pathPhases {
		k[i] = p.key
	}
	return k
}

// pathPlot stacks each key's median phase times into one bar.
func pathPlot(keys []pathKey, phase map[pathKey]map[string][]float64) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "rank 0's mean step (TP 4, batch 32, 20 ms forward)"
	p.Y.Label.Text = "ms (median of runs)"
	var below *plotter.BarChart
	top := 0.0
	for _, ph := range pathPhases {
		vals := make(plotter.Values, len(keys))
		for i, k := range keys {
			vals[i] = median(phase[k][ph.key])
		}
		b, err := plotter.NewBarChart(vals, vg.Points(30))
		if err != nil {
			return nil, err
		}
		b.Color, b.LineStyle.Width = ph.c, 0
		if below != nil {
			b.StackOn(below)
		}
		below = b
		p.Add(b)
		p.Legend.Add(ph.key, b)
	}
	labels := make([]string, len(keys))
	for i, k := range keys {
		labels[i] = fmt.Sprintf("%s\n%d tokens", k.variant, k.tokens)
		top = max(top, median(phase[k]["total"]))
	}
	p.Legend.Top = true
	// The bars are mostly forward time: the axis starts 1 ms below the
	// shortest forward phase so the other phases show (the title says so).
	low := top
	for _, k := range keys {
		low = min(low, median(phase[k]["forward"]))
	}
	p.Y.Min, p.Y.Max = math.Floor(low)-1, top+0.6
	p.Title.Text += fmt.Sprintf("; the axis starts at %.0f ms", p.Y.Min)
	p.X.Min, p.X.Max = -0.5, float64(len(keys))-0.5
	p.NominalX(labels...)
	return p, nil
}
