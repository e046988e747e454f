package serve

import (
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// plotSummary writes a PNG of s to path: each path's TTFT and ITL p50 and
// p99 as bars, tokens/s in the title.
func plotSummary(path string, s Summary) (err error) {
	defer func() {
		if e := recover(); e != nil { // gonum panics on some degenerate data
			err = fmt.Errorf("--plot %s: %v", path, e)
		}
	}()
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%d streaming clients, TP %d, forward %g ms\nHTTP %.0f vs NATS %.0f output tokens/s (%.3f×)",
		s.Clients, s.NProc, s.ForwardTimeMS, s.HTTP.TokensPerS, s.NATS.TokensPerS, s.TokensRatio)
	p.Y.Label.Text = "ms (median over rounds)"
	p.Y.Min = 0
	// Headroom above the tallest bar keeps the legend off the bars.
	p.Y.Max = 1.3 * max(s.HTTP.TTFTP99MS, s.NATS.TTFTP99MS, s.HTTP.ITLP99MS, s.NATS.ITLP99MS, 1e-3)
	w := vg.Points(22)
	for i, q := range []struct {
		name string
		s    PathSummary
		c    color.Color
	}{
		{"HTTP gateway", s.HTTP, color.RGBA{R: 0xd6, G: 0x60, B: 0x1f, A: 0xff}},
		{"NATS direct", s.NATS, color.RGBA{R: 0x1f, G: 0x6f, B: 0xb4, A: 0xff}},
	} {
		b, err := plotter.NewBarChart(plotter.Values{q.s.TTFTP50MS, q.s.TTFTP99MS, q.s.ITLP50MS, q.s.ITLP99MS}, w)
		if err != nil {
			return fmt.Errorf("--plot: %w", err)
		}
		b.Color, b.LineStyle.Width = q.c, 0
		b.Offset = w * vg.Length(2*i-1) / 2
		p.Add(b)
		p.Legend.Add(q.name, b)
	}
	p.Legend.Top = true
	p.NominalX("TTFT p50", "TTFT p99", "ITL p50", "ITL p99")
	if err := p.Save(7*vg.Inch, 4.5*vg.Inch, path); err != nil {
		return fmt.Errorf("--plot %s: %w", path, err)
	}
	return nil
}
