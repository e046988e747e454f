package serve

import (
	"math/rand/v2"
	"slices"
	"time"

	"github.com/tpcoord/tpcoord/cmd/tpcoord/internal/bench/stats"
)

// The target: the gateway keeps at least this share of the
// NATS path's tokens/s and adds at most this much to TTFT p50.
const (
	TargetTokensRatio = 0.95
	TargetTTFTDiffMS  = 1.0
)

// RoundResult is one JSON line: one round of one path. Latencies are
// nearest-rank percentiles over the round's requests (TTFT) and over every
// gap between two tokens of a request (ITL), in ms.
type RoundResult struct {
	Kind         string    `json:"kind"` // "round"
	Path         string    `json:"path"` // PathHTTP or PathNATS
	Round        int       `json:"round"`
	Requests     int       `json:"requests"`
	OutputTokens int       `json:"output_tokens"`
	ElapsedS     float64   `json:"elapsed_s"`
	TokensPerS   float64   `json:"output_tokens_per_s"`
	TTFTP50MS    float64   `json:"ttft_p50_ms"`
	TTFTP99MS    float64   `json:"ttft_p99_ms"`
	ITLP50MS     float64   `json:"itl_p50_ms"`
	ITLP99MS     float64   `json:"itl_p99_ms"`
	ttft         []float64 // every request's TTFT, ms: the summary pools them
}

// summarize reduces a round's samples to its line.
func summarize(path string, round int, rs roundSamples) RoundResult {
	var ttft, itl []float64
	tokens := 0
	for _, s := range rs.samples {
		tokens += len(s.arrivals)
		for i, a := range s.arrivals {
			if i == 0 {
				ttft = append(ttft, ms(a))
			} else {
				itl = append(itl, ms(a-s.arrivals[i-1]))
			}
		}
	}
	r := RoundResult{Kind: "round", Path: path, Round: round, Requests: len(rs.samples),
		OutputTokens: tokens, ElapsedS: rs.elapsed.Seconds()}
	if rs.elapsed > 0 {
		r.TokensPerS = float64(tokens) / rs.elapsed.Seconds()
	}
	r.ttft = ttft
	r.TTFTP50MS, r.TTFTP99MS = stats.Quantile(ttft, 0.5), stats.Quantile(ttft, 0.99)
	r.ITLP50MS, r.ITLP99MS = stats.Quantile(itl, 0.5), stats.Quantile(itl, 0.99)
	return r
}

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

// PathSummary is one path's figures: the median over its rounds of each
// round's figure, and the TTFT p50 over all its requests.
type PathSummary struct {
	Rounds       int     `json:"rounds"`
	TTFTP50AllMS float64 `json:"ttft_p50_all_requests_ms"`
	TokensPerS   float64 `json:"output_tokens_per_s"`
	TTFTP50MS    float64 `json:"ttft_p50_ms"`
	TTFTP99MS    float64 `json:"ttft_p99_ms"`
	ITLP50MS     float64 `json:"itl_p50_ms"`
	ITLP99MS     float64 `json:"itl_p99_ms"`
}

// Setup is what a run measured with.
type Setup struct {
	NProc         int     `json:"nproc"`
	Clients       int     `json:"clients"`
	Requests      int     `json:"requests_per_round,omitempty"`
	DurationS     float64 `json:"duration_s,omitempty"`
	MaxTokens     int     `json:"max_tokens"`
	Vocab         int     `json:"vocab"`
	ForwardTimeMS float64 `json:"forward_time_ms"`
	ThinkMS       float64 `json:"think_ms"`
	Gateway       string  `json:"gateway"`
	HTTPClient    string  `json:"http_client"`
}

// Summary is the last JSON line: both paths and the gateway's cost.
type Summary struct {
	Kind string `json:"kind"` // "summary"
	stats.Machine
	Setup
	LoadBefore string      `json:"loadavg_before"` // /proc/loadavg's 1, 5, 15 min
	LoadAfter  string      `json:"loadavg_after"`
	HTTP       PathSummary `json:"http"`
	NATS       PathSummary `json:"nats"`
	// TokensRatio is HTTP's median tokens/s over NATS's; PairRatios the
	// same ratio for each HTTP round and the NATS round after it.
	TokensRatio float64   `json:"http_vs_nats_tokens_per_s"`
	PairRatios  []float64 `json:"pair_ratios"`
	// TTFTDiffMS is the TTFT p50 over all of HTTP's requests minus NATS's;
	// TTFTDiffCI95MS its 95% interval from a bootstrap of paired rounds;
	// TTFTDiffRoundsMS the median over rounds of HTTP's p50 minus NATS's.
	TTFTDiffMS       float64    `json:"ttft_p50_diff_ms"`
	TTFTDiffCI95MS   [2]float64 `json:"ttft_p50_diff_ci95_ms"`
	TTFTDiffRoundsMS float64    `json:"ttft_p50_diff_rounds_ms"`
	TargetMet        bool       `json:"target_met"`
}

// pathSummary is the medians over rounds, of one path's rounds.
func pathSummary(rounds []RoundResult) PathSummary {
	med := func(f func(RoundResult) float64) float64 {
		v := make([]float64, len(rounds))
		for i, r := range rounds {
			v[i] = f(r)
		}
		return stats.Median(v)
	}
	var all []float64
	for _, r := range rounds {
		all = append(all, r.ttft...)
	}
	return PathSummary{Rounds: len(rounds), TTFTP50AllMS: stats.Quantile(all, 0.5),
		TokensPerS: med(func(r RoundResult) float64 { return r.TokensPerS }),
		TTFTP50MS:  med(func(r RoundResult) float64 { return r.TTFTP50MS }),
		TTFTP99MS:  med(func(r RoundResult) float64 { return r.TTFTP99MS }),
		ITLP50MS:   med(func(r RoundResult) float64 { return r.ITLP50MS }),
		ITLP99MS:   med(func(r RoundResult) float64 { return r.ITLP99MS }),
	}
}

// compare fills s's paths and the gateway's cost from rounds, in the
// order they ran (HTTP, NATS, HTTP, NATS, ...).
func compare(s *Summary, rounds []RoundResult) {
	var h, n []RoundResult
	for _, r := range rounds {
		if r.Path == PathHTTP {
			h = append(h, r)
		} else {
			n = append(n, r)
		}
	}
	s.HTTP, s.NATS = pathSummary(h), pathSummary(n)
	s.PairRatios = []float64{}
	for i := range min(len(h), len(n)) {
		if n[i].TokensPerS > 0 {
			s.PairRatios = append(s.PairRatios, h[i].TokensPerS/n[i].TokensPerS)
		}
	}
	if s.NATS.TokensPerS > 0 {
		s.TokensRatio = s.HTTP.TokensPerS / s.NATS.TokensPerS
	}
	s.TTFTDiffMS = s.HTTP.TTFTP50AllMS - s.NATS.TTFTP50AllMS
	s.TTFTDiffRoundsMS = s.HTTP.TTFTP50MS - s.NATS.TTFTP50MS
	s.TTFTDiffCI95MS = bootstrapTTFTDiff(h, n, bootstrapReps, bootstrapSeed)
	s.TargetMet = s.TokensRatio >= TargetTokensRatio && s.TTFTDiffMS <= TargetTTFTDiffMS
}

// The bootstrap's replicates and its fixed seed (the interval is the same
// for the same rounds).
const (
	bootstrapReps = 1000
	bootstrapSeed = 0x5e7e
)

// bootstrapTTFTDiff is the 95% interval of the pooled TTFT p50 difference
// (HTTP minus NATS) over reps resamplings of the rounds: each draws round
// indices with replacement and takes HTTP's and NATS's round of each
// index together, so drift between rounds (the shared machine) and the
// step-phase spread within them both show in the interval.
func bootstrapTTFTDiff(h, n []RoundResult, reps int, seed uint64) [2]float64 {
	k := min(len(h), len(n))
	if k == 0 || reps <= 0 {
		return [2]float64{}
	}
	rng := rand.New(rand.NewPCG(seed, 0))
	diffs := make([]float64, reps)
	var hs, ns []float64
	for b := range diffs {
		hs, ns = hs[:0], ns[:0]
		for range k {
			i := rng.IntN(k)
			hs, ns = append(hs, h[i].ttft...), append(ns, n[i].ttft...)
		}
		diffs[b] = stats.Quantile(hs, 0.5) - stats.Quantile(ns, 0.5)
	}
	slices.Sort(diffs)
	return [2]float64{stats.Nearest(diffs, 0.025), stats.Nearest(diffs, 0.975)}
}
