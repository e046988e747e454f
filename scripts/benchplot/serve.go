package main

import (
	"encoding/json"
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// The serve bench (tpcoord bench serve, serve.jsonl): streaming clients
// through the HTTP gateway and straight over NATS, rounds alternating. Its
// summary line holds the medians over rounds.

type servePath struct {
	Rounds     int     `json:"rounds"`
	TokensPerS float64 `json:"output_tokens_per_s"`
	TTFTP50MS  float64 `json:"ttft_p50_ms"`
	TTFTP99MS  float64 `json:"ttft_p99_ms"`
	ITLP50MS   float64 `json:"itl_p50_ms"`
	ITLP99MS   float64 `json:"itl_p99_ms"`
}

type serveSummary struct {
	NProc         int       `json:"nproc"`
	Clients       int       `json:"clients"`
	ForwardTimeMS float64   `json:"forward_time_ms"`
	HTTP          servePath `json:"http"`
	NATS          servePath `json:"nats"`
	TokensRatio   float64   `json:"http_vs_nats_tokens_per_s"`
	TTFTDiffMS    float64   `json:"ttft_p50_diff_ms"`
	TTFTDiffCI95  []float64 `json:"ttft_p50_diff_ci95_ms"` // absent in older runs
	HTTPClient    string    `json:"http_client"`
}

// serve writes the summary's table and plot (serve.png).
func (g *gen) serve(recs []record) error {
	var s serveSummary
	if err := summaryOf(recs, "serve", &s); err != nil {
		return err
	}
	g.p("### HTTP gateway against NATS: %d streaming clients, %d ranks, %.0f ms forward\n\n", s.Clients, s.NProc, s.ForwardTimeMS)
	g.p("| path | tokens/s | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms |\n|---|---|---|---|---|---|\n")
	for _, q := range []struct {
		name string
		s    servePath
	}{{"HTTP gateway", s.HTTP}, {"NATS direct", s.NATS}} {
		g.p("| %s | %.0f | %.2f | %.2f | %.2f | %.2f |\n", q.name, q.s.TokensPerS, q.s.TTFTP50MS, q.s.TTFTP99MS, q.s.ITLP50MS, q.s.ITLP99MS)
	}
	g.p("\nHTTP/NATS tokens/s %.3f×, TTFT p50 %+.2f ms", s.TokensRatio, s.TTFTDiffMS)
	if len(s.TTFTDiffCI95) == 2 {
		g.p(" (over all requests; 95%% interval [%+.2f, %+.2f], paired-round bootstrap; HTTP client %s)", s.TTFTDiffCI95[0], s.TTFTDiffCI95[1], s.HTTPClient)
	}
	g.p(".\n\n")
	p, err := servePlot(s)
	if err != nil {
		return err
	}
	if err := g.save(p, "serve.png"); err != nil {
		return err
	}
	g.link("serve.png", "HTTP gateway against NATS: TTFT and ITL")
	return nil
}

// servePlot draws each path's TTFT and ITL p50 and p99 as bars, tokens/s
// in the title.
func servePlot(s serveSummary) (*plot.Plot, error) {
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
		s    servePath
		c    color.Color
	}{
		{"HTTP gateway", s.HTTP, color.RGBA{R: 0xd6, G: 0x60, B: 0x1f, A: 0xff}},
		{"NATS direct", s.NATS, color.RGBA{R: 0x1f, G: 0x6f, B: 0xb4, A: 0xff}},
	} {
		b, err := plotter.NewBarChart(plotter.Values{q.s.TTFTP50MS, q.s.TTFTP99MS, q.s.ITLP50MS, q.s.ITLP99MS}, w)
		if err != nil {
			return nil, fmt.Errorf("serve plot: %w", err)
		}
		b.Color, b.LineStyle.Width = q.c, 0
		b.Offset = w * vg.Length(2*i-1) / 2
		p.Add(b)
		p.Legend.Add(q.name, b)
	}
	p.Legend.Top = true
	p.NominalX("TTFT p50", "TTFT p99", "ITL p50", "ITL p99")
	return p, nil
}

// summaryOf decodes the summary line of bench's records into dst (the
// last, if several), or says there is none.
func summaryOf(recs []record, bench string, dst any) error {
	found := false
	for _, r := range recs {
		if r.str("kind") != "summary" {
			continue
		}
		b, _ := json.Marshal(r.vals)
		if err := json.Unmarshal(b, dst); err != nil {
			return fmt.Errorf("%s summary: %w", bench, err)
		}
		found = true
	}
	if !found {
		return fmt.Errorf("%s: no summary line", bench)
	}
	return nil
}
