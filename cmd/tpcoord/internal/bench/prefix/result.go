package prefix

import (
	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/cmd/tpcoord/internal/bench/stats"
)

// TargetTTFTRatio is the target: with caching, the median TTFT of
// the requests after the first (their prefix cached) is at most this
// share of the same median without caching.
const TargetTTFTRatio = 0.2

// Cache is what rank 0's KV cache counted over a workload (its status's
// kv counters, after minus before): tokens its prefix cache looked up
// (every admission's length: the prompt, and a preempted request's output
// too when it is admitted again) and found, and the requests it preempted.
// Computed is the tokens rank 0 had the model prefill: queries minus
// hits; with caching off rank 0 looks nothing up, and Computed is the
// prompt tokens sent (plus what preemptions recompute, not counted).
type Cache struct {
	Queries     uint64 `json:"prefix_cache_queries"`
	Hits        uint64 `json:"prefix_cache_hits"`
	Computed    uint64 `json:"prefill_computed_tokens"`
	Preemptions uint64 `json:"preemptions"`
}

// cacheDelta is the counters' change from before to after, over a
// workload that sent sent prompt tokens.
func cacheDelta(before, after api.KVStatus, sent int) Cache {
	c := Cache{Queries: after.PrefixCacheQueries - before.PrefixCacheQueries,
		Hits: after.PrefixCacheHits - before.PrefixCacheHits, Preemptions: after.Preemptions - before.Preemptions}
	c.Computed = c.Queries - min(c.Hits, c.Queries)
	if c.Queries == 0 {
		c.Computed = uint64(max(sent, 0))
	}
	return c
}

// TTFTResult is one JSON line: the TTFT workload on one job. TTFTs are
// in ms, from sending a request to its first token, client side.
type TTFTResult struct {
	Kind     string    `json:"kind"` // "ttft"
	Round    int       `json:"round"`
	Caching  string    `json:"caching"` // ModeOn or ModeOff
	Requests int       `json:"requests"`
	FirstMS  float64   `json:"first_ms"`    // the first request's (its prefix not cached)
	RestP50  float64   `json:"rest_p50_ms"` // the median of the others'
	RestMax  float64   `json:"rest_max_ms"`
	TTFTMS   []float64 `json:"ttft_ms"` // every request's, in order
	Cache
}

// ttftResult reduces the TTFT workload's samples (at least two) to its line.
func ttftResult(round int, caching bool, ttft []float64, c Cache) TTFTResult {
	rest := ttft[1:]
	return TTFTResult{Kind: "ttft", Round: round, Caching: modeName(caching), Requests: len(ttft),
		FirstMS: ttft[0], RestP50: stats.Median(rest), RestMax: stats.Quantile(rest, 1), TTFTMS: ttft, Cache: c}
}

// ChatResult is one JSON line: the chat workload on one job.
type ChatResult struct {
	Kind         string  `json:"kind"` // "chat"
	Round        int     `json:"round"`
	Caching      string  `json:"caching"`
	Requests     int     `json:"requests"`      // conversations × turns
	PromptTokens int     `json:"prompt_tokens"` // sent, summed over the requests
	TTFTP50      float64 `json:"ttft_p50_ms"`
	TTFTP99      float64 `json:"ttft_p99_ms"`
	ElapsedS     float64 `json:"elapsed_s"`
	// MaxStepTokens is rank 0's most tokens in one forward pass over the
	// job's life (both workloads).
	MaxStepTokens int `json:"max_step_tokens"`
	Cache
	ttft []float64 // every request's TTFT, ms: the summary pools them
}

// chatResult reduces the chat workload's samples to its line.
func chatResult(round int, caching bool, s chatSamples, c Cache, maxStep int) ChatResult {
	return ChatResult{Kind: "chat", Round: round, Caching: modeName(caching), Requests: len(s.ttft),
		PromptTokens: s.promptTokens, TTFTP50: stats.Quantile(s.ttft, 0.5), TTFTP99: stats.Quantile(s.ttft, 0.99),
		ElapsedS: s.elapsed.Seconds(), MaxStepTokens: maxStep, Cache: c, ttft: s.ttft}
}

// ModeSummary is one mode's figures over its rounds: the TTFT workload's
// first requests (median over rounds) and other requests (median of all
// of them, pooled over rounds), and the chat workload's prefill tokens
// computed (median over rounds) and TTFT percentiles (pooled).
type ModeSummary struct {
	Rounds        int     `json:"rounds"`
	FirstMS       float64 `json:"first_ms"`
	RestP50       float64 `json:"rest_p50_ms"`
	ChatPrompt    float64 `json:"chat_prompt_tokens"`
	ChatComputed  float64 `json:"chat_prefill_computed_tokens"`
	ChatTTFTP50   float64 `json:"chat_ttft_p50_ms"`
	ChatTTFTP99   float64 `json:"chat_ttft_p99_ms"`
	MaxStepTokens int     `json:"max_step_tokens"`
}

// modeSummary summarizes one mode's lines.
func modeSummary(ttft []TTFTResult, chat []ChatResult) ModeSummary {
	var first, rest, prompt, computed, chatTTFT []float64
	for _, r := range ttft {
		first, rest = append(first, r.FirstMS), append(rest, r.TTFTMS[1:]...)
	}
	m := ModeSummary{Rounds: len(ttft)}
	for _, c := range chat {
		prompt, computed = append(prompt, float64(c.PromptTokens)), append(computed, float64(c.Computed))
		chatTTFT = append(chatTTFT, c.ttft...)
		m.MaxStepTokens = max(m.MaxStepTokens, c.MaxStepTokens)
	}
	m.FirstMS, m.RestP50 = stats.Median(first), stats.Median(rest)
	m.ChatPrompt, m.ChatComputed = stats.Median(prompt), stats.Median(computed)
	m.ChatTTFTP50, m.ChatTTFTP99 = stats.Quantile(chatTTFT, 0.5), stats.Quantile(chatTTFT, 0.99)
	return m
}

// Summary is the last JSON line: both modes and their ratios.
type Summary struct {
	Kind string `json:"kind"` // "summary"
	stats.Machine
	AVX512F bool `json:"avx512f"`
	Setup
	LoadBefore string      `json:"loadavg_before"` // /proc/loadavg's 1, 5, 15 min
	LoadAfter  string      `json:"loadavg_after"`
	On         ModeSummary `json:"on"`
	Off        ModeSummary `json:"off"`
	// TTFTRatio is On.RestP50 over Off.RestP50, the target's figure;
	// RoundRatios the same ratio of each round's two jobs.
	TTFTRatio   float64   `json:"ttft_rest_on_vs_off"`
	RoundRatios []float64 `json:"round_ratios"`
	// FirstVsRest is On.RestP50 over On.FirstMS: what the cached prefix
	// saves within the job with caching.
	FirstVsRest float64 `json:"on_rest_vs_first"`
	// ChatComputedRatio is the chat's prefill computed with caching over
	// without.
	ChatComputedRatio float64 `json:"chat_prefill_on_vs_off"`
	Target            float64 `json:"target_ttft_ratio"`
	TargetMet         bool    `json:"target_met"`
}

// Setup is what a run measured with.
type Setup struct {
	NProc         int     `json:"nproc"`
	Worker        string  `json:"worker"` // the worker command, or "synthetic"
	ForwardTimeMS float64 `json:"forward_time_ms,omitempty"`
	Vocab         int     `json:"vocab"`
	PrefixTokens  int     `json:"prefix_tokens"`
	SuffixTokens  int     `json:"suffix_tokens"`
	Requests      int     `json:"requests"`
	MaxTokens     int     `json:"max_tokens"`
	Chats         int     `json:"chats"`
	Turns         int     `json:"turns"`
	TurnTokens    int     `json:"turn_tokens"`
	AnswerTokens  int     `json:"answer_tokens"`
	Rounds        int     `json:"rounds"`
}

// compare fills s's modes and ratios from the lines.
func compare(s *Summary, ttft []TTFTResult, chat []ChatResult) {
	split := func(mode string) ([]TTFTResult, []ChatResult) {
		var t []TTFTResult
		var c []ChatResult
		for _, r := range ttft {
			if r.Caching == mode {
				t = append(t, r)
			}
		}
		for _, r := range chat {
			if r.Caching == mode {
				c = append(c, r)
			}
		}
		return t, c
	}
	onT, onC := split(ModeOn)
	offT, offC := split(ModeOff)
	s.On, s.Off = modeSummary(onT, onC), modeSummary(offT, offC)
	s.TTFTRatio, s.FirstVsRest = stats.Ratio(s.On.RestP50, s.Off.RestP50), stats.Ratio(s.On.RestP50, s.On.FirstMS)
	s.ChatComputedRatio = stats.Ratio(s.On.ChatComputed, s.Off.ChatComputed)
	s.RoundRatios = []float64{}
	for i := range min(len(onT), len(offT)) {
		s.RoundRatios = append(s.RoundRatios, stats.Ratio(onT[i].RestP50, offT[i].RestP50))
	}
	s.Target = TargetTTFTRatio
	s.TargetMet = s.Off.RestP50 > 0 && s.TTFTRatio <= TargetTTFTRatio
}
