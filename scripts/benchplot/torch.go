package main

import (
	"fmt"
	"math"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// The torch bench (scripts/bench-torch.sh, torch.jsonl): a real model at
// several TP sizes, run by tpcoord in its full configuration, by tpcoord
// in the baseline configuration, and by a plain PyTorch loop
// (scripts/torch_tp_loop.py), several rounds each. Its lines are bench
// e2e's combo lines (impl "tpcoord") and the loop's (impl
// "pytorch-loop"); the section reports medians over the rounds.

// torchSetups are the setups in table order: label, and how a line is
// recognised (impl, and the combination for tpcoord).
var torchSetups = []struct{ name, impl, combo string }{
	{"tpcoord full (pool+logspace+rank0)", "tpcoord", "pool+logspace+rank0"},
	{"tpcoord baseline (sync+softmax+all)", "tpcoord", "sync+softmax+all"},
	{"plain PyTorch loop", "pytorch-loop", "pytorch-loop"},
}

const torchLoop = 2 // index of the plain loop in torchSetups

// torchPhases are rank 0's step phases in the breakdown, in stack order:
// the key in step_median_ms, and its label.
var torchPhases = [][2]string{
	{"forward", "forward"}, {"sample", "sample"}, {"await", "await"}, {"publish", "publish"},
	{"reply", "reply"}, {"broadcast", "broadcast (loop)"},
}

type torchKey struct{ tp, setup int }

// torchData is every round's figures per TP size and setup.
type torchData struct {
	tps   []int
	rate  map[torchKey][]float64            // output tokens/s per round
	phase map[torchKey]map[string][]float64 // step_median_ms field -> per round
	first record
}

func torchSetup(r record) int {
	for i, s := range torchSetups {
		if r.str("impl") == s.impl && r.str("combo") == s.combo {
			return i
		}
	}
	return -1
}

func collectTorch(recs []record) *torchData {
	d := &torchData{rate: map[torchKey][]float64{}, phase: map[torchKey]map[string][]float64{}}
	for _, r := range recs {
		s := torchSetup(r)
		tp, okTP := r.num("nproc")
		tps, okRate := r.num("output_tokens_per_s")
		if r.str("kind") != "combo" || s < 0 || !okTP || !okRate {
			continue // bench e2e's stage lines, other combinations
		}
		if len(d.rate) == 0 {
			d.first = r
		}
		k := torchKey{int(tp), s}
		if !slices.Contains(d.tps, k.tp) {
			d.tps = append(d.tps, k.tp)
		}
		d.rate[k] = append(d.rate[k], tps)
		step, _ := r.vals["step_median_ms"].(map[string]any)
		for _, ph := range append(torchPhases, [2]string{"total", ""}) {
			if v, ok := step[ph[0]].(float64); ok {
				if d.phase[k] == nil {
					d.phase[k] = map[string][]float64{}
				}
				d.phase[k][ph[0]] = append(d.phase[k][ph[0]], v)
			}
		}
	}
	slices.Sort(d.tps)
	return d
}

// median of v (the mean of the middle two for an even count); NaN for none.
func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Sorted(slices.Values(v))
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

func (g *gen) torch(recs []record) error {
	d := collectTorch(recs)
	g.p("### A real model: tpcoord vs a plain PyTorch loop\n\n")
	if len(d.rate) == 0 {
		g.generic(recs)
		return nil
	}
	r0 := d.first
	g.p("Batch %s concurrent requests, %s output tokens each, vocab %s; medians over the rounds (each round runs the three setups in turn, their order rotating; the k-th line of a setup at a TP size is its run in round k). \"vs plain loop\" is the setup's median over the loop's at the same TP size; \"per round\" is the median over the rounds of the setup's tokens/s over the loop's in the same round, which a change of the machine's load between rounds does not skew.\n\n",
		r0.str("batch"), r0.str("tokens"), r0.str("vocab"))
	g.torchRates(d)
	g.torchSteps(d)
	if err := g.torchRatePlot(d); err != nil {
		return err
	}
	return g.torchStepPlot(d)
}

// torchRates writes the tokens/s table.
func (g *gen) torchRates(d *torchData) {
	g.p("| TP | setup | rounds | output tokens/s (median) | min–max | vs plain loop | per round |\n|---|---|---|---|---|---|---|\n")
	for _, tp := range d.tps {
		loops := d.rate[torchKey{tp, torchLoop}]
		loop := median(loops)
		for s, setup := range torchSetups {
			v := d.rate[torchKey{tp, s}]
			if len(v) == 0 {
				continue
			}
			m := median(v)
			vs, per := "", ""
			if loop > 0 {
				vs = fmt.Sprintf("%.2f×", m/loop)
			}
			if r := perRound(v, loops); len(r) > 0 {
				per = fmt.Sprintf("%.2f×", median(r))
			}
			g.p("| %d | %s | %d | %.1f | %.1f–%.1f | %s | %s |\n", tp, setup.name, len(v), m, slices.Min(v), slices.Max(v), vs, per)
		}
	}
	g.p("\n")
}

// perRound is v[k]/loop[k] for the rounds k both have.
func perRound(v, loop []float64) []float64 {
	var out []float64
	for k := range min(len(v), len(loop)) {
		if loop[k] > 0 {
			out = append(out, v[k]/loop[k])
		}
	}
	return out
}

// torchSteps writes rank 0's per-step breakdown: for each phase, the
// median over the rounds of each round's median step.
func (g *gen) torchSteps(d *torchData) {
	g.p("Rank 0's step, ms (median over rounds of each round's median per phase; phases' medians need not add up to the total's):\n\n")
	g.p("| TP | setup | forward | sample | await | publish | reply | broadcast | total |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, tp := range d.tps {
		for s, setup := range torchSetups {
			ph := d.phase[torchKey{tp, s}]
			if ph == nil {
				continue
			}
			row := fmt.Sprintf("| %d | %s |", tp, setup.name)
			for _, k := range []string{"forward", "sample", "await", "publish", "reply", "broadcast", "total"} {
				cell := ""
				if v, ok := ph[k]; ok {
					cell = fmtMS(median(v))
				}
				row += " " + cell + " |"
			}
			g.p("%s\n", row)
		}
	}
	g.p("\n")
}

// frame sets the ranges of a bar plot of n nominal x positions: every
// bar inside, and room above the tallest for the legend (top left).
func frame(p *plot.Plot, n int) {
	p.X.Min, p.X.Max = -0.7, float64(n)-0.3
	p.Y.Min = 0
	p.Y.Max *= 1.45
	p.Legend.Top, p.Legend.Left = true, true
}

// torchRatePlot saves torch.png: tokens/s by TP size, a bar per setup.
func (g *gen) torchRatePlot(d *torchData) error {
	p := plot.New()
	p.Title.Text = "real model: output tokens/s by TP size (medians)"
	p.Y.Label.Text = "output tokens/s"
	w := vg.Points(18)
	for s, setup := range torchSetups {
		vals := make(plotter.Values, len(d.tps))
		for i, tp := range d.tps {
			if m := median(d.rate[torchKey{tp, s}]); !math.IsNaN(m) {
				vals[i] = m
			}
		}
		bars, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return err
		}
		bars.Color = plotutil.Color(s)
		bars.LineStyle.Width = 0
		bars.Offset = vg.Length(s-1) * w
		p.Add(bars)
		p.Legend.Add(setup.name, bars)
	}
	frame(p, len(d.tps))
	labels := make([]string, len(d.tps))
	for i, tp := range d.tps {
		labels[i] = "TP " + strconv.Itoa(tp)
	}
	p.NominalX(labels...)
	if err := g.save(p, "torch.png"); err != nil {
		return err
	}
	g.link("torch.png", "real model tokens/s by TP")
	return nil
}

// torchStepPlot saves torch-steps.png: rank 0's median step, stacked by
// phase, a bar per TP size and setup.
func (g *gen) torchStepPlot(d *torchData) error {
	var keys []torchKey
	var labels []string
	short := []string{"full", "baseline", "loop"}
	for _, tp := range d.tps {
		for s := range torchSetups {
			if k := (torchKey{tp, s}); d.phase[k] != nil {
				keys = append(keys, k)
				labels = append(labels, fmt.Sprintf("TP%d %s", tp, short[s]))
			}
		}
	}
	if len(keys) == 0 {
		return nil
	}
	p := plot.New()
	p.Title.Text = "rank 0's step by phase (medians, ms)"
	p.Y.Label.Text = "ms per step"
	var below *plotter.BarChart
	for i, ph := range torchPhases {
		vals := make(plotter.Values, len(keys))
		for j, k := range keys {
			if m := median(d.phase[k][ph[0]]); !math.IsNaN(m) {
				vals[j] = m
			}
		}
		bars, err := plotter.NewBarChart(vals, vg.Points(20))
		if err != nil {
			return err
		}
		bars.Color = plotutil.Color(i)
		bars.LineStyle.Width = 0
		if below != nil {
			bars.StackOn(below)
		}
		below = bars
		p.Add(bars)
		p.Legend.Add(ph[1], bars)
	}
	frame(p, len(keys))
	p.NominalX(labels...)
	p.X.Tick.Label.Rotation = math.Pi / 6
	p.X.Tick.Label.XAlign = -0.9
	if err := g.save(p, "torch-steps.png"); err != nil {
		return err
	}
	g.link("torch-steps.png", "rank 0 step breakdown")
	return nil
}
