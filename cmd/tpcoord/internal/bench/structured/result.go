package structured

import (
	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/cmd/tpcoord/internal/bench/stats"
)

// The two kinds of batch, as the lines name them.
const (
	KindUnconstrained = "unconstrained"
	KindConstrained   = "constrained"
)

// BatchResult is one JSON line: one batch of one round (Round -1: the
// constrained warm-up, which compiles the schema and fills the mask
// cache).
type BatchResult struct {
	Kind     string `json:"kind"` // "batch" or "warmup"
	Round    int    `json:"round"`
	Batch    string `json:"batch"` // KindUnconstrained or KindConstrained
	Requests int    `json:"requests"`
	// OutputTokens is the tokens produced over the batch; Stopped counts
	// the requests that ended at their grammar's end (finish_reason stop)
	// rather than at max_tokens, and JSONValid those of them whose text
	// parses as JSON.
	OutputTokens int     `json:"output_tokens"`
	Stopped      int     `json:"stopped"`
	JSONValid    int     `json:"json_valid"`
	MinTokens    int     `json:"min_request_tokens"`
	TotalS       float64 `json:"total_s"`
	TokensPerS   float64 `json:"output_tokens_per_s"`
	// Step and StepMean are rank 0's step phases over the batch's steps
	// (median and mean ms of each phase, from its flight recorder);
	// absent if it could not be read.
	Step     *Phases `json:"step_median_ms,omitempty"`
	StepMean *Phases `json:"step_mean_ms,omitempty"`
	steps    []api.StepTiming
}

// Phases are rank 0's step phases in ms over some steps.
type Phases = stats.StepPhases

// batchOutcome is what one batch returned.
type batchOutcome struct {
	tokens    [][]int32 // each request's output tokens
	stopped   int
	jsonValid int
	elapsed   float64 // seconds, first submission to last final reply
	steps     []api.StepTiming
}

// batchResult shapes a batch's outcome into its line.
func batchResult(kind string, round int, batch string, b batchOutcome) BatchResult {
	r := BatchResult{Kind: kind, Round: round, Batch: batch, Requests: len(b.tokens), Stopped: b.stopped,
		JSONValid: b.jsonValid, TotalS: b.elapsed, steps: b.steps}
	for i, t := range b.tokens {
		r.OutputTokens += len(t)
		if i == 0 || len(t) < r.MinTokens {
			r.MinTokens = len(t)
		}
	}
	if b.elapsed > 0 {
		r.TokensPerS = float64(r.OutputTokens) / b.elapsed
	}
	r.Step, r.StepMean = stats.SummarizeSteps(b.steps, stats.Median), stats.SummarizeSteps(b.steps, stats.Mean)
	return r
}

// RoundResult is one JSON line per round, after its two batches.
type RoundResult struct {
	Kind          string  `json:"kind"` // "round"
	Round         int     `json:"round"`
	First         string  `json:"first"` // the batch that ran first
	Unconstrained float64 `json:"unconstrained_tokens_per_s"`
	Constrained   float64 `json:"constrained_tokens_per_s"`
	Ratio         float64 `json:"ratio"` // constrained over unconstrained
}

// roundResult pairs round r's two batches.
func roundResult(r int, first string, unc, con BatchResult) RoundResult {
	return RoundResult{Kind: "round", Round: r, First: first, Unconstrained: unc.TokensPerS,
		Constrained: con.TokensPerS, Ratio: stats.Ratio(con.TokensPerS, unc.TokensPerS)}
}

// KindSummary is one kind's figures over the rounds: the median of its
// batches' tokens/s and output tokens, and rank 0's step phases over
// every step of its batches (pooled).
type KindSummary struct {
	Batches      int     `json:"batches"`
	TokensPerS   float64 `json:"tokens_per_s"`
	OutputTokens float64 `json:"output_tokens"`
	Stopped      int     `json:"stopped"`
	JSONValid    int     `json:"json_valid"`
	Step         *Phases `json:"step_median_ms,omitempty"`
	StepMean     *Phases `json:"step_mean_ms,omitempty"`
}

// kindSummary summarizes one kind's batches.
func kindSummary(batches []BatchResult) KindSummary {
	var tps, toks []float64
	var steps []api.StepTiming
	k := KindSummary{Batches: len(batches)}
	for _, b := range batches {
		tps, toks = append(tps, b.TokensPerS), append(toks, float64(b.OutputTokens))
		k.Stopped += b.Stopped
		k.JSONValid += b.JSONValid
		steps = append(steps, b.steps...)
	}
	k.TokensPerS, k.OutputTokens = stats.Median(tps), stats.Median(toks)
	k.Step, k.StepMean = stats.SummarizeSteps(steps, stats.Median), stats.SummarizeSteps(steps, stats.Mean)
	return k
}

// Setup is what a run measured with.
type Setup struct {
	NProc         int     `json:"nproc"`
	Batch         int     `json:"batch"`
	Vocab         int     `json:"vocab"`
	ForwardTimeMS float64 `json:"forward_time_ms"`
	Tokens        int     `json:"max_tokens"`
	Temperature   float64 `json:"temperature"`
	Tokenizer     string  `json:"tokenizer"`
	EOS           int     `json:"eos"`
	Schema        string  `json:"schema"` // "built-in" or the --schema file
	Rounds        int     `json:"rounds"`
}

// Summary is the last JSON line.
type Summary struct {
	Kind string `json:"kind"` // "summary"
	stats.Machine
	AVX512F bool `json:"avx512f"`
	Setup
	LoadBefore    string      `json:"loadavg_before"` // /proc/loadavg's 1, 5, 15 min
	LoadAfter     string      `json:"loadavg_after"`
	Unconstrained KindSummary `json:"unconstrained"`
	Constrained   KindSummary `json:"constrained"`
	// Ratio is the median of RoundRatios (each round's constrained
	// tokens/s over its unconstrained), the target's figure;
	// RatioOfMedians is Constrained.TokensPerS over
	// Unconstrained.TokensPerS.
	Ratio          float64   `json:"ratio"`
	RoundRatios    []float64 `json:"round_ratios"`
	RatioOfMedians float64   `json:"ratio_of_medians"`
	Target         float64   `json:"target_ratio"`
	TargetMet      bool      `json:"target_met"`
}

// summarize fills s's kinds and ratios from the batch and round lines.
func summarize(s *Summary, batches []BatchResult, rounds []RoundResult) {
	var unc, con []BatchResult
	for _, b := range batches {
		if b.Kind != "batch" {
			continue
		}
		if b.Batch == KindConstrained {
			con = append(con, b)
		} else {
			unc = append(unc, b)
		}
	}
	s.Unconstrained, s.Constrained = kindSummary(unc), kindSummary(con)
	s.RoundRatios = []float64{}
	for _, r := range rounds {
		s.RoundRatios = append(s.RoundRatios, r.Ratio)
	}
	s.Ratio = stats.Median(s.RoundRatios)
	s.RatioOfMedians = stats.Ratio(s.Constrained.TokensPerS, s.Unconstrained.TokensPerS)
	s.Target = TargetRatio
	s.TargetMet = len(rounds) > 0 && s.Ratio >= TargetRatio
}

// stepsIn are the steps that started in [from, to).
func stepsIn(steps []api.StepTiming, from, to int64) []api.StepTiming {
	var out []api.StepTiming
	for _, s := range steps {
		if ns := s.Start.UnixNano(); ns >= from && ns < to {
			out = append(out, s)
		}
	}
	return out
}
