package main

import (
	"encoding/json"
	"fmt"
	"image/color"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// The launch bench (tpcoord bench launch, launch.jsonl): one line per world
// size, with every run's time from launch's start to its ready file.

// launchRun is one run of a line; the table shows each run's time to ready
// beside the line's medians.
type launchRun struct {
	ReadyS float64 `json:"ready_s"`
}

type launchLine struct {
	NProc            int         `json:"nproc"`
	Runs             []launchRun `json:"runs"`
	ReadyP50S        float64     `json:"ready_p50_s"`
	CPUP50S          float64     `json:"cpu_p50_s"`
	CPUPerProcP50MS  float64     `json:"cpu_per_proc_p50_ms"`
	FaultsPerProcP50 float64     `json:"faults_per_proc_p50"`
	TargetS          float64     `json:"target_s"`
	TargetMet        *bool       `json:"target_met"`
}

// launch writes the table of time to ready per world size and launch.png.
func (g *gen) launch(recs []record) error {
	lines := make([]launchLine, 0, len(recs))
	for _, r := range recs {
		raw, err := json.Marshal(r.vals)
		if err != nil {
			return err
		}
		var l launchLine
		if err := json.Unmarshal(raw, &l); err != nil {
			return fmt.Errorf("launch: %w", err)
		}
		if l.NProc < 1 || len(l.Runs) == 0 {
			return fmt.Errorf("launch: a line without nproc or runs")
		}
		lines = append(lines, l)
	}
	sort.Slice(lines, func(i, j int) bool { return lines[i].NProc < lines[j].NProc })
	g.p("### `launch --nproc N`: time to the ready file\n\n")
	g.p("From `tpcoord launch` (its defaults) to its ready file, polled every 5 ms; CPU is user + system of launch (with the children it has reaped) and its ranks, read from /proc at readiness. Runs interleaved across sizes.\n\n")
	g.p("| ranks | ready in, s (runs) | median | CPU, s | CPU per process, ms | page faults per process | target |\n|---|---|---|---|---|---|---|\n")
	target := 0.0
	for _, l := range lines {
		ready := make([]float64, len(l.Runs))
		for i, s := range l.Runs {
			ready[i] = s.ReadyS
		}
		t := ""
		if l.TargetMet != nil {
			t, target = fmt.Sprintf("≤ %.0f s: %s", l.TargetS, map[bool]string{true: "met", false: "not met"}[*l.TargetMet]), l.TargetS
		}
		g.p("| %d | %s | **%.2f** | %.2f | %.0f | %.0f | %s |\n", l.NProc, joinNums(ready, "%.2f"), l.ReadyP50S, l.CPUP50S, l.CPUPerProcP50MS, l.FaultsPerProcP50, t)
	}
	g.p("\n")
	if err := g.launchPlot(lines, target); err != nil {
		return err
	}
	g.link("launch.png", "launch time to ready")
	return nil
}

func (g *gen) launchPlot(lines []launchLine, target float64) error {
	p := plot.New()
	p.Title.Text = "launch --nproc N: time to the ready file"
	p.X.Label.Text = "ranks"
	p.Y.Label.Text = "seconds"
	var runs, med plotter.XYs
	for _, l := range lines {
		for _, s := range l.Runs {
			runs = append(runs, plotter.XY{X: float64(l.NProc), Y: s.ReadyS})
		}
		med = append(med, plotter.XY{X: float64(l.NProc), Y: l.ReadyP50S})
	}
	sc, err := plotter.NewScatter(runs)
	if err != nil {
		return err
	}
	sc.Color = color.RGBA{R: 0x1f, G: 0x6f, B: 0xb4, A: 0xff}
	ln, err := plotter.NewLine(med)
	if err != nil {
		return err
	}
	ln.Color, ln.Width = sc.Color, vg.Points(1.5)
	p.Add(sc, ln)
	p.Legend.Add("run", sc)
	p.Legend.Add("median", ln)
	if target > 0 {
		tl, err := plotter.NewLine(plotter.XYs{{X: float64(lines[0].NProc), Y: target}, {X: float64(lines[len(lines)-1].NProc), Y: target}})
		if err != nil {
			return err
		}
		tl.Color, tl.Dashes = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}, []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(tl)
		p.Legend.Add("target", tl)
	}
	p.Legend.Top, p.Legend.Left = true, true
	p.Y.Min = 0
	return g.save(p, "launch.png")
}
