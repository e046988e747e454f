package e2e

import (
	"fmt"
	"io"

	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/cmd/tpcoord/internal/bench/stats"
)

// Result is one JSON line of `tpcoord bench e2e`: one combination.
type Result struct {
	Kind string `json:"kind"` // "combo"
	stats.Machine
	CPUs  string `json:"cpus,omitempty"` // taskset list the whole launch ran under
	NProc int    `json:"nproc"`
	Batch int    `json:"batch"`
	Vocab int    `json:"vocab"`
	// Synthetic is the synthetic executor's forward time; nil, and its
	// field absent, with the worker executor, whose forward pass is the
	// model's.
	*Synthetic
	// Executor and Impl are "worker" and "tpcoord" with the worker
	// executor (scripts/torch_tp_loop.py writes Impl "pytorch-loop"),
	// absent with the synthetic one.
	Executor      string  `json:"executor,omitempty"`
	Impl          string  `json:"impl,omitempty"`
	Tokens        int     `json:"tokens"`
	Combo         string  `json:"combo"`
	Noise         string  `json:"noise"`
	Sampling      string  `json:"sampling"`
	SamplingRanks string  `json:"sampling_ranks"`
	OutputTokens  int     `json:"output_tokens"`
	TotalS        float64 `json:"total_s"`
	TokensPerS    float64 `json:"output_tokens_per_s"`
	// VsBaseline is TokensPerS over the baseline's (sync+softmax+all) in
	// the same run; absent if the baseline was not measured.
	VsBaseline *float64 `json:"vs_baseline,omitempty"`
	// Step is rank 0's step-time breakdown over the batch's steps (median
	// ms per phase, from its flight recorder); absent if it could not be
	// read.
	Step *StepBreakdown `json:"step_median_ms,omitempty"`
	// StepMean is the mean of each phase over the same steps: unlike the
	// medians its phases add up to the mean step, the slow steps included.
	StepMean *StepBreakdown `json:"step_mean_ms,omitempty"`
	// Pool is rank 0's noise pool over the measured batch (from its
	// status before and after); absent without a pool or a status.
	Pool *PoolCounts `json:"noise_pool,omitempty"`
}

// PoolCounts is what rank 0's noise pool did during the measured batch.
// Taken counts the full noise rows the sampler needed (taken from the
// pool, or made inline when it had no free slot); Inline counts those rank
// 0 made itself on the step's critical path because no producer had them
// ready or no slot was free: 0 means the producers kept up.
type PoolCounts struct {
	Producers uint64 `json:"producers"`
	Form      string `json:"form"` // exact or bound
	Taken     uint64 `json:"rows_taken"`
	Inline    uint64 `json:"rows_inline"`
}

// poolCounts is the difference of rank 0's sampler counters between two
// status replies; nil if either lacks them.
func poolCounts(before, after map[string]uint64) *PoolCounts {
	if before == nil || after == nil {
		return nil
	}
	d := func(k string) uint64 { return after[k] - min(after[k], before[k]) }
	form := "exact"
	if after["noise_bound_rows"] == 1 {
		form = "bound"
	}
	return &PoolCounts{Producers: after["noise_producers"], Form: form,
		Taken:  d("noise_rows_taken") + d("noise_take_errors"),
		Inline: d("noise_rows_inline") + d("noise_take_errors")}
}

// Synthetic is what a run on the synthetic executor adds to its Result.
type Synthetic struct {
	ForwardTimeMS float64 `json:"forward_time_ms"`
}

// StepBreakdown is the time per phase of rank 0's steps, in ms.
type StepBreakdown = stats.StepPhases

// breakdown is the nearest-rank median of each phase over steps; nil for
// none.
func breakdown(steps []api.StepTiming) *StepBreakdown {
	return stats.SummarizeSteps(steps, func(v []float64) float64 { return stats.Quantile(v, 0.5) })
}

// meanBreakdown is the mean of each phase over steps; nil for none.
func meanBreakdown(steps []api.StepTiming) *StepBreakdown {
	return stats.SummarizeSteps(steps, stats.Mean)
}

// StageResult is one JSON line per stage, after the combinations: the
// stage's own contribution, as tokens/s ratios. OnAlone is (baseline with
// only this stage on) / baseline; OffAlone is full / (full with only this
// stage off). Absent when a combination is missing.
type StageResult struct {
	Kind     string   `json:"kind"` // "stage"
	Stage    string   `json:"stage"`
	Off      string   `json:"off"`
	On       string   `json:"on"`
	OnAlone  *float64 `json:"only_on_vs_baseline,omitempty"`
	OffAlone *float64 `json:"full_vs_only_off,omitempty"`
}

// stageResults are the stages' lines from the combinations' tokens/s.
func stageResults(rate map[Combo]float64) []StageResult {
	ratio := func(a, b Combo) *float64 {
		ra, oka := rate[a]
		rb, okb := rate[b]
		if !oka || !okb || rb == 0 {
			return nil
		}
		v := ra / rb
		return &v
	}
	var out []StageResult
	for _, st := range Stages() {
		onAlone, offAlone := Baseline, Full
		st.set(&onAlone, st.On)
		st.set(&offAlone, st.Off)
		out = append(out, StageResult{Kind: "stage", Stage: st.Name, Off: st.Off, On: st.On,
			OnAlone: ratio(onAlone, Baseline), OffAlone: ratio(Full, offAlone)})
	}
	return out
}

func printResult(w io.Writer, r Result, asJSON bool) error {
	if asJSON {
		return stats.WriteJSONLine(w, r)
	}
	step := "-"
	switch b := r.Step; {
	case b == nil:
	case r.Executor == WorkerExecutor:
		step = fmt.Sprintf("%.1f: await %.2f, publish %.2f, forward %.1f, sample %.2f, reply %.2f (medians of each)",
			b.Total, b.Await, b.Publish, b.Forward, b.Sample, b.Reply)
	default:
		step = fmt.Sprintf("%.1f: forward %.1f, sample %.1f (medians of each)", b.Total, b.Forward, b.Sample)
	}
	if m := r.StepMean; m != nil {
		step += fmt.Sprintf("; mean %.2f: await %.2f, publish %.2f, forward %.2f, sample %.2f, reply %.2f", m.Total, m.Await, m.Publish, m.Forward, m.Sample, m.Reply)
	}
	if p := r.Pool; p != nil {
		step += fmt.Sprintf("; noise rows inline %d of %d (%s rows, %d producers)", p.Inline, p.Taken, p.Form, p.Producers)
	}
	_, err := fmt.Fprintf(w, "%-24s %14.1f %10.2f %12s  %s\n", r.Combo, r.TokensPerS, r.TotalS, fmtRatio(r.VsBaseline), step)
	return err
}

// printHeader writes the table's header: the machine and the setup.
func printHeader(w io.Writer, o Options, m stats.Machine) {
	model := fmt.Sprintf("forward %v", o.ForwardTime)
	if o.Executor == WorkerExecutor {
		model = fmt.Sprintf("worker %q, eos %d, temperature %g", o.Model.WorkerCmd, o.Model.EOS, o.Temperature)
	}
	fmt.Fprintf(w, "machine: %s, %d cores, %s; cpus %q; nproc %d, batch %d, vocab %d, %s, tokens %d\n",
		m.CPU, m.Cores, m.Go, o.CPUs, o.NProc, o.Batch, o.Vocab, model, o.Tokens)
	fmt.Fprintf(w, "%-24s %14s %10s %12s  %s\n", "combination", "output_tok/s", "total_s", "vs_baseline", "rank 0 step ms (median)")
}

// printStages writes the stages' lines, under a header in a table.
func printStages(w io.Writer, rate map[Combo]float64, asJSON bool) error {
	if !asJSON {
		fmt.Fprintf(w, "%-16s %-20s %24s %20s\n", "stage", "off -> on", "only_on_vs_baseline", "full_vs_only_off")
	}
	for _, s := range stageResults(rate) {
		var err error
		if asJSON {
			err = stats.WriteJSONLine(w, s)
		} else {
			_, err = fmt.Fprintf(w, "%-16s %-20s %24s %20s\n", s.Stage, s.Off+" -> "+s.On, fmtRatio(s.OnAlone), fmtRatio(s.OffAlone))
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func fmtRatio(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.3f", *v)
}
