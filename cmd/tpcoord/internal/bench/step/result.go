package step

import (
	"fmt"
	"io"

	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/cmd/tpcoord/internal/bench/stats"
)

// Result is one JSON line of `tpcoord bench step`: one world size. Step
// figures come from rank 0's flight recorder, over the steps of the
// measured batch (rows > 0); overhead = total − forward − sample.
type Result struct {
	stats.Machine
	NProc         int     `json:"nproc"`
	Batch         int     `json:"batch"`
	Vocab         int     `json:"vocab"`
	Tokens        int     `json:"tokens"`
	ForwardTimeMS float64 `json:"forward_time_ms"`
	Steps         int     `json:"steps"`
	OverheadP50US float64 `json:"overhead_p50_us"`
	OverheadP90US float64 `json:"overhead_p90_us"`
	OverheadP99US float64 `json:"overhead_p99_us"`
	// Medians of rank 0's phases over the same steps, for where the time goes.
	StepP50US    float64 `json:"step_p50_us"`
	AwaitP50US   float64 `json:"await_p50_us"`
	PublishP50US float64 `json:"publish_p50_us"`
	ForwardP50US float64 `json:"forward_p50_us"`
	SampleP50US  float64 `json:"sample_p50_us"`
	ReplyP50US   float64 `json:"reply_p50_us"`
	// The raw TCP fan-out to nproc−1 follower processes, same run (bench
	// broadcast's machinery); absent for nproc 1.
	FloorFollowers int     `json:"floor_followers"`
	FloorPayload   int     `json:"floor_payload"`
	FloorP50US     float64 `json:"floor_p50_us,omitempty"`
	FloorP99US     float64 `json:"floor_p99_us,omitempty"`
	Ratio          float64 `json:"overhead_p50_over_floor_p50,omitempty"`
	TargetRatio    float64 `json:"target_ratio"`
	// TargetMet applies the TP 8 target's threshold to this N's ratio.
	TargetMet bool `json:"target_met"`
}

// summarize computes the percentiles over the steps (in µs).
func summarize(steps []api.StepTiming) Result {
	col := func(f func(api.StepTiming) float64) []float64 {
		v := make([]float64, len(steps))
		for i, s := range steps {
			v[i] = 1000 * f(s)
		}
		return v
	}
	r := Result{Steps: len(steps)}
	if len(steps) == 0 {
		return r
	}
	p50 := func(f func(api.StepTiming) float64) float64 { return stats.Quantile(col(f), 0.5) }
	r.OverheadP50US, r.OverheadP90US, r.OverheadP99US = stats.Quantiles(col(func(s api.StepTiming) float64 {
		return max(0, s.TotalMs-s.ForwardMs-s.SampleMs)
	}))
	r.StepP50US = p50(func(s api.StepTiming) float64 { return s.TotalMs })
	r.AwaitP50US = p50(func(s api.StepTiming) float64 { return s.AwaitMs })
	r.PublishP50US = p50(func(s api.StepTiming) float64 { return s.PublishMs })
	r.ForwardP50US = p50(func(s api.StepTiming) float64 { return s.ForwardMs })
	r.SampleP50US = p50(func(s api.StepTiming) float64 { return s.SampleMs })
	r.ReplyP50US = p50(func(s api.StepTiming) float64 { return s.ReplyMs })
	return r
}

func printResult(w io.Writer, r Result, asJSON bool) error {
	if asJSON {
		return stats.WriteJSONLine(w, r)
	}
	ratio := "-"
	if r.Ratio > 0 {
		ratio = fmt.Sprintf("%.2fx", r.Ratio)
	}
	_, err := fmt.Fprintf(w, "%5d %6d %9.0f %9.0f %9.0f %9.0f %9.0f %9.0f %9.0f %9.0f %9.0f %7s\n", r.NProc, r.Steps,
		r.OverheadP50US, r.OverheadP90US, r.OverheadP99US, r.StepP50US, r.AwaitP50US, r.PublishP50US, r.ReplyP50US,
		r.FloorP50US, r.FloorP99US, ratio)
	return err
}
