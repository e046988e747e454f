package main

import (
	"fmt"
	"image/color"
	"math"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// The prefix bench (tpcoord bench prefix, prefix.jsonl): TTFT of requests
// sharing a long prompt prefix, and multi-turn chats, with rank 0's prefix
// cache on and off. Its summary line holds the figures pooled over rounds.

type prefixMode struct {
	Rounds           int     `json:"rounds"`
	FirstMS          float64 `json:"first_ms"`
	RestP50MS        float64 `json:"rest_p50_ms"`
	ChatPromptTokens float64 `json:"chat_prompt_tokens"`
	ChatPrefill      float64 `json:"chat_prefill_computed_tokens"`
	ChatTTFTP50MS    float64 `json:"chat_ttft_p50_ms"`
	ChatTTFTP99MS    float64 `json:"chat_ttft_p99_ms"`
}

type prefixSummary struct {
	NProc        int        `json:"nproc"`
	PrefixTokens int        `json:"prefix_tokens"`
	SuffixTokens int        `json:"suffix_tokens"`
	Requests     int        `json:"requests"`
	Chats        int        `json:"chats"`
	Turns        int        `json:"turns"`
	Rounds       int        `json:"rounds"`
	On           prefixMode `json:"on"`
	Off          prefixMode `json:"off"`
	RestRatio    float64    `json:"ttft_rest_on_vs_off"`
	RoundRatios  []float64  `json:"round_ratios"`
	PrefillRatio float64    `json:"chat_prefill_on_vs_off"`
	Target       float64    `json:"target_ttft_ratio"`
	TargetMet    *bool      `json:"target_met"`
}

// prefix writes the summary's table and plot (prefix.png).
func (g *gen) prefix(recs []record) error {
	var s prefixSummary
	if err := summaryOf(recs, "prefix", &s); err != nil {
		return err
	}
	g.p("### Prefix caching on and off: TP %d, %d rounds\n\n", s.NProc, s.Rounds)
	g.p("TTFT: %d requests one after another, a shared %d-token prefix and a %d-token suffix each; the first request's TTFT is the median over rounds, the rest's pooled over rounds. Chat: %d conversations × %d turns at once.\n\n",
		s.Requests, s.PrefixTokens, s.SuffixTokens, s.Chats, s.Turns)
	g.p("| | caching on | caching off | on / off |\n|---|---|---|---|\n")
	row := func(name string, on, off float64, f func(float64) string) {
		ratio := ""
		if off > 0 {
			ratio = fmt.Sprintf("%.3f", on/off)
		}
		g.p("| %s | %s | %s | %s |\n", name, f(on), f(off), ratio)
	}
	ms := func(v float64) string { return fmtMS(v) }
	row("TTFT first request, ms", s.On.FirstMS, s.Off.FirstMS, ms)
	row(fmt.Sprintf("**TTFT the other %d, median ms**", max(s.Requests-1, 0)), s.On.RestP50MS, s.Off.RestP50MS, ms)
	row("chat TTFT p50, ms", s.On.ChatTTFTP50MS, s.Off.ChatTTFTP50MS, ms)
	row("chat TTFT p99, ms", s.On.ChatTTFTP99MS, s.Off.ChatTTFTP99MS, ms)
	row("chat prefill tokens computed", s.On.ChatPrefill, s.Off.ChatPrefill, func(v float64) string { return fmt.Sprintf("%.0f", v) })
	g.p("\n")
	if len(s.RoundRatios) > 0 {
		rs := make([]string, len(s.RoundRatios))
		for i, r := range s.RoundRatios {
			rs[i] = fmt.Sprintf("%.3f", r)
		}
		g.p("On/off ratio of the other requests' median TTFT per round: %s.", strings.Join(rs, ", "))
	}
	if s.Target > 0 && s.TargetMet != nil {
		met := "met"
		if !*s.TargetMet {
			met = "not met"
		}
		g.p(" Target ≤ %g: %s.", s.Target, met)
	}
	g.p("\n\n")
	p, err := prefixPlot(s)
	if err != nil {
		return err
	}
	if err := g.save(p, "prefix.png"); err != nil {
		return err
	}
	g.link("prefix.png", "prefix caching on and off: TTFT")
	return nil
}

// floorBars is a bar chart whose bars rise from floor rather than 0, so
// that it can be drawn on a log scale.
type floorBars struct {
	*plotter.BarChart
	floor float64
}

func (b floorBars) Plot(c draw.Canvas, plt *plot.Plot) {
	trX, trY := plt.Transforms(&c)
	for i, v := range b.Values {
		x := trX(b.XMin + float64(i))
		if !c.ContainsX(x) || v <= b.floor {
			continue
		}
		x0 := x - b.Width/2 + b.Offset
		x1 := x0 + b.Width
		y0, y1 := trY(b.floor), trY(v)
		pts := []vg.Point{{X: x0, Y: y0}, {X: x0, Y: y1}, {X: x1, Y: y1}, {X: x1, Y: y0}}
		c.FillPolygon(b.Color, c.ClipPolygonY(pts))
	}
}

func (b floorBars) DataRange() (xmin, xmax, ymin, ymax float64) {
	xmin, xmax, _, ymax = b.BarChart.DataRange()
	return xmin, xmax, b.floor, ymax
}

// prefixPlot draws, for caching on and off, the TTFT of the first request,
// the median of the rest, and the chat's p50 and p99 as bars on a log
// scale, each labelled with its value; the rest's on/off ratio is in the
// title.
func prefixPlot(s prefixSummary) (*plot.Plot, error) {
	vals := [2]plotter.Values{
		{s.On.FirstMS, s.On.RestP50MS, s.On.ChatTTFTP50MS, s.On.ChatTTFTP99MS},
		{s.Off.FirstMS, s.Off.RestP50MS, s.Off.ChatTTFTP50MS, s.Off.ChatTTFTP99MS},
	}
	lo, hi := math.Inf(1), 0.0
	for _, vs := range vals {
		for _, v := range vs {
			if v > 0 {
				lo, hi = min(lo, v), max(hi, v)
			}
		}
	}
	if hi == 0 {
		return nil, fmt.Errorf("prefix plot: no positive TTFT")
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("prefix caching, TP %d, %d-token shared prefix, %d rounds\nTTFT of the other %d requests, median: on / off = %.3f (%s vs %s ms)",
		s.NProc, s.PrefixTokens, s.Rounds, max(s.Requests-1, 0), s.RestRatio, fmtMS(s.On.RestP50MS), fmtMS(s.Off.RestP50MS))
	p.Y.Label.Text = "TTFT, ms (log scale)"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	floor := math.Pow(10, math.Floor(math.Log10(lo/2)))
	p.Y.Min = floor
	// Headroom above the tallest bar for its label and the legend.
	p.Y.Max = math.Pow(10, math.Ceil(math.Log10(hi*4)))
	w := vg.Points(30)
	for i, q := range []struct {
		name string
		c    color.Color
	}{
		{"caching on", color.RGBA{R: 0x1f, G: 0x6f, B: 0xb4, A: 0xff}},
		{"caching off", color.RGBA{R: 0xd6, G: 0x60, B: 0x1f, A: 0xff}},
	} {
		bc, err := plotter.NewBarChart(vals[i], w)
		if err != nil {
			return nil, fmt.Errorf("prefix plot: %w", err)
		}
		bc.Color, bc.LineStyle.Width = q.c, 0
		bc.Offset = w * vg.Length(2*i-1) / 2
		b := floorBars{bc, floor}
		p.Add(b)
		p.Legend.Add(q.name, b)
		// Each bar's value, centred just above it.
		var xy plotter.XYLabels
		for j, v := range vals[i] {
			if v > 0 {
				xy.XYs = append(xy.XYs, plotter.XY{X: float64(j), Y: v})
				xy.Labels = append(xy.Labels, fmtMS(v))
			}
		}
		if len(xy.XYs) == 0 {
			continue
		}
		l, err := plotter.NewLabels(xy)
		if err != nil {
			return nil, fmt.Errorf("prefix plot: %w", err)
		}
		for k := range l.TextStyle {
			l.TextStyle[k].XAlign = draw.XCenter
			l.TextStyle[k].YAlign = draw.YBottom
		}
		l.Offset = vg.Point{X: bc.Offset, Y: vg.Points(2)}
		p.Add(l)
	}
	// Room at either side for the outer bars, and for the legend at the
	// top left, above the first group's labels.
	p.X.Min, p.X.Max = -0.6, float64(len(vals[0]))-0.4
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.XOffs = vg.Points(8)
	p.NominalX("first request", fmt.Sprintf("other %d, median", max(s.Requests-1, 0)), "chat p50", "chat p99")
	return p, nil
}
