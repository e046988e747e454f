package sampler

import (
	"math"
	"testing"

	"github.com/tpcoord/tpcoord/broadcast/api"
)

type statCase struct {
	name   string
	logits []float32
	params api.Params
	prompt []int32
	output []int32
	pool   bool
	allow  []uint64
}

func statCases() []statCase {
	row := gaussRow(200, 1.5, 2, 11)
	masked := append([]float32(nil), row...)
	for i := 0; i < len(masked); i += 2 {
		masked[i] = float32(math.Inf(-1))
	}
	return []statCase{
		{name: "plain T=1", logits: row, params: api.Params{Temperature: 1}},
		{name: "plain T=0.5 pool", logits: row, params: api.Params{Temperature: 0.5}, pool: true},
		{name: "plain T=2", logits: row, params: api.Params{Temperature: 2}},
		{name: "topk 10", logits: row, params: api.Params{Temperature: 1, TopK: 10}},
		{name: "topk 10 pool", logits: row, params: api.Params{Temperature: 1, TopK: 10}, pool: true},
		{name: "topp 0.7", logits: row, params: api.Params{Temperature: 1, TopP: 0.7}},
		{name: "topp 0.7 pool", logits: row, params: api.Params{Temperature: 1.3, TopP: 0.7}, pool: true},
		{name: "minp 0.1", logits: row, params: api.Params{Temperature: 1, MinP: 0.1}},
		{name: "topk+topp", logits: row, params: api.Params{Temperature: 0.8, TopK: 30, TopP: 0.8}},
		{name: "topk+topp+minp", logits: row, params: api.Params{Temperature: 1, TopK: 50, TopP: 0.9, MinP: 0.05}},
		{name: "penalties", logits: row, params: api.Params{Temperature: 1, RepetitionPenalty: 1.5, FrequencyPenalty: 0.7, PresencePenalty: 0.5},
			prompt: []int32{0, 1, 2, 3, 4, 5}, output: []int32{10, 10, 10, 11, 3, 50}},
		{name: "bias", logits: row, params: api.Params{Temperature: 1, LogitBias: map[int32]float32{7: 4, 8: 2, 9: -50}}},
		{name: "allowed", logits: row, params: api.Params{Temperature: 1, AllowedTokenIDs: []int32{1, 2, 3, 50, 51, 52, 199}}},
		{name: "masked support", logits: masked, params: api.Params{Temperature: 1.5}},
		{name: "masked support topp", logits: masked, params: api.Params{Temperature: 1, TopP: 0.85}, pool: true},
		{name: "grammar mask", logits: row, params: api.Params{Temperature: 1}, allow: randomAllow(200, 3, 41)},
		{name: "grammar mask pool", logits: row, params: api.Params{Temperature: 0.8}, allow: randomAllow(200, 2, 42), pool: true},
		{name: "grammar mask topp", logits: row, params: api.Params{Temperature: 1, TopP: 0.8}, allow: randomAllow(200, 2, 43)},
		{name: "grammar mask topk bias", logits: row, params: api.Params{Temperature: 1, TopK: 20, LogitBias: map[int32]float32{5: 3}}, allow: randomAllow(200, 4, 44)},
	}
}

// TestChiSquareModes checks every mode against its exact target
// distribution (float64), for the fast sampler and for Reference. Each
// check has false-failure probability 1e-6 (see chiCritical).
func TestChiSquareModes(t *testing.T) {
	n := scale(40000)
	for _, c := range statCases() {
		t.Run(c.name, func(t *testing.T) {
			p := c.params
			row := Row{Logits: c.logits, Params: &p, Prompt: c.prompt, Output: c.output, EOS: -1, Allow: c.allow}
			probs := targetProbs(row)
			chiSquare(t, draw(t, New(DefaultConfig()), row, n, 1234, c.pool), probs, n)
			chiSquare(t, draw(t, NewReference(DefaultConfig()), row, n, 1234, false), probs, n)
		})
	}
}

// TestZipfTail: at vocab 100352, tokens with probability below 2^-20 are
// drawn at their expected rate. Their total probability is ~3%, so the
// expected count is meaningful; the 4σ bound has false-failure probability
// 6e-5 under the normal approximation.
func TestZipfTail(t *testing.T) {
	const vocab = 100352
	n := scale(12000)
	logits := zipfRow(vocab, 1.2, 21)
	p := api.Params{Temperature: 1}
	row := Row{Logits: logits, Params: &p, EOS: -1}
	probs := targetProbs(row)
	tail := map[int32]bool{}
	var pt float64
	for i, q := range probs {
		if q < 1.0/(1<<20) {
			tail[int32(i)] = true
			pt += q
		}
	}
	counts := draw(t, New(DefaultConfig()), row, n, 99, false)
	got := 0
	for tok, c := range counts {
		if tail[tok] {
			got += c
		}
	}
	mean := pt * float64(n)
	sigma := math.Sqrt(float64(n) * pt * (1 - pt))
	t.Logf("%d tail tokens, total probability %.4f: expected %.1f ± %.1f, got %d", len(tail), pt, mean, sigma, got)
	if math.Abs(float64(got)-mean) > 4*sigma {
		t.Fatalf("tail count %d, expected %.1f ± 4×%.1f", got, mean, sigma)
	}
	// The head is right too (false-failure probability 1e-6).
	chiSquare(t, counts, probs, n)
}

// TestTiesSplitEvenly: tokens with equal logits are drawn equally often,
// also when top-k or top-p cut through the tie (both are tie-inclusive).
// Each check has false-failure probability 1e-6.
func TestTiesSplitEvenly(t *testing.T) {
	logits := make([]float32, 300)
	for i := range logits {
		logits[i] = -float32(i%37) * 0.2
	}
	for _, i := range []int{5, 50, 150, 299} {
		logits[i] = 3
	}
	n := scale(40000)
	for _, p := range []api.Params{{Temperature: 1}, {Temperature: 1, TopK: 2}, {Temperature: 1, TopP: 0.1}, {Temperature: 0.5, MinP: 0.5}} {
		row := Row{Logits: logits, Params: &p, EOS: -1}
		counts := draw(t, New(DefaultConfig()), row, n, 7, false)
		probs := targetProbs(row)
		if p.TopK == 2 || p.TopP == 0.1 || p.MinP == 0.5 {
			for _, i := range []int32{5, 50, 150, 299} {
				if probs[i] != 0.25 {
					t.Fatalf("%+v: target of tied token %d is %v, want 1/4", p, i, probs[i])
				}
			}
		}
		chiSquare(t, counts, probs, n)
	}
}

// TestFastMatchesReference is a two-sample chi-square test of homogeneity
// between Sampler and Reference draws (false-failure probability 1e-6 each).
func TestFastMatchesReference(t *testing.T) {
	row := zipfRow(500, 1.1, 31)
	n := scale(30000)
	for _, p := range []api.Params{{Temperature: 1}, {Temperature: 0.7, TopK: 20}, {Temperature: 1, TopP: 0.8}, {Temperature: 1, MinP: 0.02}, {Temperature: 1.2, TopK: 100, TopP: 0.9}} {
		r := Row{Logits: row, Params: &p, EOS: -1}
		a := draw(t, New(DefaultConfig()), r, n, 5, false)
		b := draw(t, NewReference(DefaultConfig()), r, n, 6, false)
		var stat float64
		var cells, poolA, poolB int
		for tok := range int32(len(row)) {
			x, y := a[tok], b[tok]
			if x+y < 10 {
				poolA += x
				poolB += y
				continue
			}
			stat += float64((x-y)*(x-y)) / float64(x+y)
			cells++
		}
		if poolA+poolB > 0 {
			stat += float64((poolA-poolB)*(poolA-poolB)) / float64(poolA+poolB)
			cells++
		}
		if crit := chiCritical(cells - 1); stat > crit {
			t.Fatalf("%+v: two-sample chi-square %.1f > %.1f (df %d)", p, stat, crit, cells-1)
		}
	}
}
