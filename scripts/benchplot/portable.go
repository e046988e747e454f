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

// bench "portable" is `tpcoord bench sampler` lines of two builds run in
// the same rounds, scripts/bench.sh adding "build" ("native": the build
// under test; "purego": the portable Go path that s390x and ppc64le run)
// and "round".

type portKey struct {
	mode  string
	batch int
}

// portableTargets are the portable path's targets at vocab 100352 (ms).
var portableTargets = map[portKey]float64{
	{"plain", 32}: 2.0, {"topk", 32}: 2.0, {"topp", 32}: 5.0, {"plain", 1}: 0.1,
}

// portable writes the table of both builds' medians over rounds, with the
// targets, and portable.png.
func (g *gen) portable(recs []record) error {
	ms := map[portKey]map[string][]float64{}
	vocab := 0
	for _, r := range recs {
		b, _ := r.num("batch")
		v, _ := r.num("vocab")
		m, ok := r.num("median_ms")
		build := r.str("build")
		if !ok || build == "" {
			return fmt.Errorf("portable: a line without build or median_ms")
		}
		vocab = int(v)
		k := portKey{r.str("mode"), int(b)}
		if ms[k] == nil {
			ms[k] = map[string][]float64{}
		}
		ms[k][build] = append(ms[k][build], m)
	}
	keys := make([]portKey, 0, len(ms))
	var oneBuild []string
	for k, b := range ms {
		if len(b["native"]) == 0 || len(b["purego"]) == 0 {
			oneBuild = append(oneBuild, fmt.Sprintf("%s batch %d", k.mode, k.batch))
			continue
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return fmt.Errorf("portable: no case has lines of both builds (native and purego)")
	}
	sort.Strings(oneBuild)
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].batch != keys[j].batch {
			return keys[i].batch < keys[j].batch
		}
		return modeOrder(keys[i].mode) < modeOrder(keys[j].mode)
	})
	g.p("### The portable path: a `-tags purego` build against this one, same rounds\n\n")
	g.p("Vocab %d, pool noise, median ms per call over rounds (each round's figure is a median of its calls). s390x and ppc64le hosts run the purego path.\n\n", vocab)
	g.p("| mode | batch | this build (rounds) | purego (rounds) | purego / this | purego target |\n|---|---|---|---|---|---|\n")
	for _, k := range keys {
		nat, pg := ms[k]["native"], ms[k]["purego"]
		target := ""
		if t, ok := portableTargets[k]; ok && vocab == 100352 {
			target = fmt.Sprintf("≤ %.1f: %s", t, map[bool]string{true: "met", false: "not met"}[median(pg) <= t])
		}
		g.p("| %s | %d | %s | %s | %s | %s |\n", k.mode, k.batch, joinNums(nat, "%.3f"), joinNums(pg, "%.3f"), fmtRatio(median(pg)/median(nat)), target)
	}
	g.p("\n")
	if len(oneBuild) > 0 {
		g.p("Left out, measured on one build only: %s.\n\n", strings.Join(oneBuild, ", "))
	}
	if err := g.portablePlot(keys, ms); err != nil {
		return err
	}
	g.link("portable.png", "portable build against this build")
	return nil
}

func modeOrder(m string) int {
	for i, o := range []string{"plain", "topk", "topp", "minp", "greedy"} {
		if m == o {
			return i
		}
	}
	return 99
}

func (g *gen) portablePlot(keys []portKey, ms map[portKey]map[string][]float64) error {
	p := plot.New()
	p.Title.Text = "sampler, pool noise: this build against purego (median of rounds)"
	p.Y.Label.Text = "ms per call"
	w := vg.Points(12)
	for i, s := range []struct {
		build string
		c     color.Color
	}{
		{"native", color.RGBA{R: 0x1f, G: 0x6f, B: 0xb4, A: 0xff}},
		{"purego", color.RGBA{R: 0xd6, G: 0x60, B: 0x1f, A: 0xff}},
	} {
		vals := make(plotter.Values, len(keys))
		for j, k := range keys {
			vals[j] = median(ms[k][s.build])
		}
		b, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return err
		}
		b.Color, b.LineStyle.Width, b.Offset = s.c, 0, w*vg.Length(2*i-1)/2
		p.Add(b)
		p.Legend.Add(map[string]string{"native": "this build", "purego": "purego"}[s.build], b)
	}
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = fmt.Sprintf("%s\nbatch %d", k.mode, k.batch)
	}
	p.NominalX(names...)
	p.Legend.Top, p.Legend.Left = true, true
	p.Y.Min = 0
	p.X.Min, p.X.Max = -0.5, float64(len(keys))-0.5
	return g.save(p, "portable.png")
}
