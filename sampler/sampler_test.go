package sampler

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/internal/f16"
	"github.com/tpcoord/tpcoord/noisepool"
)

type exactCase struct {
	name   string
	params api.Params
	prompt []int32
	output []int32
	eos    int32
}

func exactCases() []exactCase {
	return []exactCase{
		{name: "plain T=1", params: api.Params{Temperature: 1}},
		{name: "plain T=0.3", params: api.Params{Temperature: 0.3}},
		{name: "plain T=2.5", params: api.Params{Temperature: 2.5}},
		{name: "greedy", params: api.Params{Temperature: 0}},
		{name: "topk 1", params: api.Params{Temperature: 1, TopK: 1}},
		{name: "topk 5", params: api.Params{Temperature: 0.7, TopK: 5}},
		{name: "topk 300", params: api.Params{Temperature: 1, TopK: 300}},
		{name: "topp 0.9", params: api.Params{Temperature: 1, TopP: 0.9}},
		{name: "topp 0.3", params: api.Params{Temperature: 0.8, TopP: 0.3}},
		{name: "minp 0.05", params: api.Params{Temperature: 1, MinP: 0.05}},
		{name: "topk+topp", params: api.Params{Temperature: 1, TopK: 40, TopP: 0.8}},
		{name: "topp+minp", params: api.Params{Temperature: 1.2, TopP: 0.95, MinP: 0.01}},
		{name: "penalties", params: api.Params{Temperature: 1, RepetitionPenalty: 1.3, FrequencyPenalty: 0.5, PresencePenalty: 0.4},
			prompt: []int32{1, 2, 3, 900}, output: []int32{5, 5, 7, 2, 300}},
		{name: "bias", params: api.Params{Temperature: 1, LogitBias: map[int32]float32{7: 30, 8: -100, 999: 5}}},
		{name: "allowed", params: api.Params{Temperature: 1, AllowedTokenIDs: []int32{3, 17, 400, 401, 999}}},
		{name: "allowed topk", params: api.Params{Temperature: 1, TopK: 2, AllowedTokenIDs: []int32{3, 17, 400, 401, 999}}},
		{name: "min tokens", params: api.Params{Temperature: 1, MinTokens: 5, StopTokenIDs: []int32{10, 11}}, output: []int32{1}, eos: 12},
		{name: "everything", params: api.Params{Temperature: 0.9, TopK: 100, TopP: 0.9, MinP: 0.02, RepetitionPenalty: 1.1,
			FrequencyPenalty: 0.2, PresencePenalty: 0.1, LogitBias: map[int32]float32{3: 2}, MinTokens: 3, StopTokenIDs: []int32{4}},
			prompt: []int32{3, 9}, output: []int32{9}, eos: 5},
	}
}

// TestMatchesFullRow: the fast paths, with pool noise and with inline noise,
// sparse and dense, return exactly the full-row argmax for every noise row.
func TestMatchesFullRow(t *testing.T) {
	rowsets := map[string][]float32{
		"zipf":  zipfRow(1000, 1.0, 1),
		"gauss": gaussRow(1000, 3, 4, 2),
		"flat":  gaussRow(1000, 0.01, 0, 3),
	}
	draws := scale(120)
	s, dense := New(DefaultConfig()), New(DefaultConfig())
	dense.denseOnly = true
	for rname, logits := range rowsets {
		for _, c := range exactCases() {
			t.Run(rname+"/"+c.name, func(t *testing.T) {
				p := c.params
				eos := c.eos
				if eos == 0 {
					eos = -1
				}
				noise, bounds := make([]float32, len(logits)), make([]float32, len(logits))
				for d := range draws {
					row := Row{Logits: logits, Params: &p, Prompt: c.prompt, Output: c.output, EOS: eos, NoiseKey: 77, NoiseRow: uint64(d)}
					want := fullRow(row)
					var out [6]Result
					pooled, bounded := withPoolNoise(row, noise, bounds)
					s.Sample([]Row{row, pooled, bounded}, out[:3])
					dense.Sample([]Row{row, pooled, bounded}, out[3:])
					for i, r := range out {
						if r.Err != nil || r.Token != want {
							t.Fatalf("draw %d (noise %s, dense=%v): got %d %v, full row gives %d", d, [3]string{"inline", "pool", "bound"}[i%3], i >= 3, r.Token, r.Err, want)
						}
					}
				}
			})
		}
	}
}

// TestHalfTypes: f16 and bf16 rows sample exactly like the float32 row of
// their converted values.
func TestHalfTypes(t *testing.T) {
	logits := gaussRow(3000, 3, 3, 9)
	half := make([]uint16, len(logits))
	bf16 := make([]uint16, len(logits))
	for i, v := range logits {
		half[i] = f16.Float32ToHalf(v)
		bf16[i] = f16.Float32ToBFloat16(v)
	}
	s := New(DefaultConfig())
	for _, p := range []api.Params{{Temperature: 1}, {Temperature: 0.7, TopP: 0.9}, {Temperature: 1, TopK: 20}, {}} {
		for d := range scale(60) {
			for _, dt := range []Dtype{Float16, BFloat16} {
				row := Row{Logits16: half, Dtype: dt, Params: &p, EOS: -1, NoiseKey: 5, NoiseRow: uint64(d)}
				if dt == BFloat16 {
					row.Logits16 = bf16
				}
				conv := make([]float32, len(logits))
				convertRow(conv, row.Logits16, dt)
				want := Row{Logits: conv, Params: &p, EOS: -1, NoiseKey: 5, NoiseRow: uint64(d)}
				var out [2]Result
				s.Sample([]Row{row, want}, out[:])
				if out[0].Err != nil || out[0].Token != out[1].Token || out[0].Token != fullRow(want) {
					t.Fatalf("%v %+v draw %d: got %+v, float32 row gives %+v", dt, p, d, out[0], out[1])
				}
			}
		}
	}
}

func TestNonFiniteRowsAreErrors(t *testing.T) {
	s := New(DefaultConfig())
	good := gaussRow(600, 2, 1, 1)
	cases := []struct {
		name string
		row  Row
		want string
	}{
		{"nan", Row{Logits: withAt(good, 300, float32(math.NaN()))}, "NaN at token 300"},
		{"+inf", Row{Logits: withAt(good, 599, float32(math.Inf(1)))}, "+Inf at token 599"},
		{"f16 nan", Row{Logits16: halfRow(withAt(good, 3, float32(math.NaN()))), Dtype: Float16}, "NaN at token 3"},
		{"bf16 +inf", Row{Logits16: bf16Row(withAt(good, 4, float32(math.Inf(1)))), Dtype: BFloat16}, "+Inf at token 4"},
		{"all masked", Row{Logits: allAt(600, float32(math.Inf(-1)))}, ErrNoCandidates.Error()},
		{"bias overflow", Row{Logits: withAt(good, 2, 3e38), Params: &api.Params{Temperature: 1, LogitBias: map[int32]float32{2: 3e38}}}, "+Inf after bias"},
		{"bad noise", Row{Logits: good, Noise: make([]float32, 5)}, "noise row has 5 values"},
		{"bad params", Row{Logits: good, Params: &api.Params{Temperature: 1, TopK: 601}}, "top_k"},
		{"bad prompt", Row{Logits: good, Params: &api.Params{Temperature: 1, RepetitionPenalty: 1.2}, Prompt: []int32{600}}, "prompt token 600"},
	}
	for _, c := range cases {
		for _, p := range []*api.Params{c.row.Params, {Temperature: 1}, {Temperature: 1, TopK: 5}, {Temperature: 1, TopP: 0.5}, {}} {
			row := c.row
			if row.Params == nil {
				row.Params = p
			}
			row.EOS = -1
			out := make([]Result, 3)
			ok := Row{Logits: good, Params: &api.Params{Temperature: 1}, EOS: -1}
			s.Sample([]Row{ok, row, ok}, out)
			if out[1].Err == nil || !strings.Contains(out[1].Err.Error(), c.want) || out[1].Token != -1 {
				t.Fatalf("%s: got %+v, want error containing %q", c.name, out[1], c.want)
			}
			if out[0].Err != nil || out[2].Err != nil {
				t.Fatalf("%s: neighbours failed: %+v", c.name, out)
			}
			ref := NewReference(DefaultConfig())
			ref.Sample([]Row{row}, out[:1])
			if out[0].Err == nil && c.name != "bad noise" { // Reference ignores Noise
				t.Fatalf("%s: Reference accepted the row", c.name)
			}
		}
	}
	var out [1]Result
	s.Sample([]Row{{Logits: allAt(10, float32(math.Inf(-1))), EOS: -1}}, out[:])
	if !errors.Is(out[0].Err, ErrNoCandidates) {
		t.Fatalf("all -inf: %v", out[0].Err)
	}
}

// TestMaskedNeverWins: −inf tokens never win, even with adversarial pool
// noise (+huge or +Inf at the masked positions).
func TestMaskedNeverWins(t *testing.T) {
	logits := gaussRow(2000, 2, 2, 4)
	for i := 0; i < len(logits); i += 3 {
		logits[i] = float32(math.Inf(-1))
	}
	s := New(DefaultConfig())
	noise := make([]float32, len(logits))
	for _, p := range []api.Params{{Temperature: 1}, {Temperature: 50}, {Temperature: 1, TopK: 1500}, {Temperature: 1, TopP: 0.999}, {Temperature: 1, MinP: 1e-9}} {
		for d := range scale(40) {
			noisepool.FillRow(1, uint64(d), noise)
			for i := 0; i < len(noise); i += 3 {
				noise[i] = float32(math.Inf(1))
				if d%2 == 0 {
					noise[i] = 1e30
				}
			}
			var out [2]Result
			s.Sample([]Row{{Logits: logits, Params: &p, EOS: -1, Noise: noise, NoiseKey: 1, NoiseRow: uint64(d)},
				{Logits: logits, Params: &p, EOS: -1, NoiseKey: 1, NoiseRow: uint64(d)}}, out[:])
			for _, r := range out {
				if r.Err != nil || r.Token%3 == 0 {
					t.Fatalf("%+v: masked token won: %+v", p, r)
				}
			}
		}
	}
}

// TestGreedyAndStops: greedy ties go to the lowest index; stop tokens and
// EOS are masked while min_tokens holds and may be sampled after. Whether
// such a token ends the request is the scheduler's rule (rank), not the
// sampler's.
func TestGreedyAndStops(t *testing.T) {
	s := New(DefaultConfig())
	l := []float32{1, 5, 5, 2, 5}
	var out [1]Result
	s.Sample([]Row{{Logits: l, Params: &api.Params{}, EOS: -1}}, out[:])
	if out[0].Token != 1 {
		t.Fatalf("greedy tie: got %d want 1 (lowest index)", out[0].Token)
	}
	p := api.Params{MinTokens: 2, StopTokenIDs: []int32{1}}
	s.Sample([]Row{{Logits: l, Params: &p, EOS: 2, Output: []int32{0}}}, out[:])
	if out[0].Token != 4 {
		t.Fatalf("min_tokens: got %+v want 4 (stop token 1 and EOS 2 masked)", out[0])
	}
	s.Sample([]Row{{Logits: l, Params: &p, EOS: 2, Output: []int32{0, 0}}}, out[:])
	if out[0].Token != 1 {
		t.Fatalf("after min_tokens: got %+v want stop token 1", out[0])
	}
	s.Sample([]Row{{Logits: []float32{0, 9}, Params: &api.Params{IgnoreEOS: true}, EOS: 1}}, out[:])
	if out[0].Token != 1 {
		t.Fatalf("EOS with ignore_eos: got %+v want 1", out[0])
	}
}

// TestSeeds: a row's token depends only on its own (key, row) noise
// identity: not on pool vs inline, nor on the rest of the batch.
func TestSeeds(t *testing.T) {
	logits := zipfRow(5000, 1, 8)
	other := gaussRow(5000, 3, 2, 9)
	s := New(DefaultConfig())
	p := api.Params{Temperature: 1}
	seeded := func(key uint64, step int, pool bool) Row {
		r := Row{Logits: logits, Params: &p, EOS: -1, NoiseKey: key, NoiseRow: uint64(step)}
		if pool {
			r.Noise = make([]float32, len(logits))
			noisepool.FillRow(key, uint64(step), r.Noise)
		}
		return r
	}
	seq := func(key uint64, pool bool, batchWith int) []int32 {
		var toks []int32
		for step := range 30 {
			rows := []Row{}
			for j := range batchWith {
				rows = append(rows, Row{Logits: other, Params: &api.Params{Temperature: 0.5, TopP: 0.8}, EOS: -1, NoiseKey: uint64(1000 + j), NoiseRow: uint64(step)})
			}
			rows = append(rows, seeded(key, step, pool))
			out := make([]Result, len(rows))
			s.Sample(rows, out)
			toks = append(toks, out[len(out)-1].Token)
		}
		return toks
	}
	a := seq(42, false, 0)
	for _, variant := range [][]int32{seq(42, true, 0), seq(42, false, 3), seq(42, true, 5)} {
		for i := range a {
			if a[i] != variant[i] {
				t.Fatalf("same seed, different tokens at step %d: %v vs %v", i, a, variant)
			}
		}
	}
	b := seq(43, false, 0)
	same := 0
	for i := range a {
		if a[i] == b[i] {
			same++
		}
	}
	// Under the Zipf row a single draw repeats with probability sum p_i^2
	// ≈ 0.2, so 30 equal draws in a row has probability ~1e-21.
	if same == len(a) {
		t.Fatalf("different seeds gave identical sequences %v", a)
	}
}

// TestTopKAloneEqualsTopKWithP1 checks token by token that top_p = 1 (and
// 0) is exactly "off".
func TestTopKAloneEqualsTopKWithP1(t *testing.T) {
	logits := zipfRow(4000, 1.1, 3)
	s := New(DefaultConfig())
	for d := range scale(200) {
		rows := []Row{
			{Logits: logits, Params: &api.Params{Temperature: 1, TopK: 50}, EOS: -1, NoiseKey: 9, NoiseRow: uint64(d)},
			{Logits: logits, Params: &api.Params{Temperature: 1, TopK: 50, TopP: 1}, EOS: -1, NoiseKey: 9, NoiseRow: uint64(d)},
		}
		out := make([]Result, 2)
		s.Sample(rows, out)
		if out[0] != out[1] {
			t.Fatalf("draw %d: %+v vs %+v", d, out[0], out[1])
		}
	}
}

func TestNoAllocsInSteadyState(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under -race")
	}
	logits := zipfRow(20000, 1, 1)
	noise := make([]float32, len(logits))
	noisepool.FillRow(1, 1, noise)
	ps := []api.Params{{Temperature: 1}, {Temperature: 1, TopK: 50}, {Temperature: 1, TopP: 0.9}, {Temperature: 1, MinP: 0.1}, {},
		{Temperature: 1, TopK: 50, TopP: 0.9, RepetitionPenalty: 1.2, FrequencyPenalty: 0.1}}
	rows := make([]Row, 0, 2*len(ps))
	for i := range ps {
		rows = append(rows, Row{Logits: logits, Params: &ps[i], EOS: -1, Prompt: []int32{1, 2}, Output: []int32{3}, NoiseKey: 1, NoiseRow: 1})
		rows = append(rows, Row{Logits: logits, Params: &ps[i], EOS: -1, Noise: noise, NoiseKey: 1, NoiseRow: 1})
	}
	out := make([]Result, len(rows))
	s := New(DefaultConfig()) // CheckParams on: validation must not allocate either
	s.Sample(rows, out)
	if a := testing.AllocsPerRun(10, func() { s.Sample(rows, out) }); a != 0 {
		t.Fatalf("%v allocations per step", a)
	}
}

func TestLogprobs(t *testing.T) {
	logits := gaussRow(3000, 2, 2, 5)
	s := New(DefaultConfig())
	p := api.Params{Temperature: 0.7, LogitBias: map[int32]float32{10: 3}}
	row := Row{Logits: logits, Params: &p, EOS: -1}
	lp, err := s.Logprobs(row, 10, 5)
	if err != nil {
		t.Fatal(err)
	}
	l := processed(row)
	var z float64
	for _, v := range l {
		z += math.Exp(float64(v) / 0.7)
	}
	want := float64(l[10])/0.7 - math.Log(z)
	if math.Abs(float64(lp.Logprob)-want) > 1e-4 {
		t.Fatalf("logprob %v want %v", lp.Logprob, want)
	}
	if len(lp.Top) != 5 || lp.Top[0].Logprob < lp.Top[4].Logprob {
		t.Fatalf("top: %+v", lp.Top)
	}
	if lp.Rank < 1 || (lp.Rank == 1) != (lp.Top[0].Token == 10) {
		t.Fatalf("rank %d top %+v", lp.Rank, lp.Top)
	}
	if _, err := s.Logprobs(row, 3000, 1); err == nil {
		t.Fatal("out of range token accepted")
	}
}

// TestLogprobsAllocations: in steady state Logprobs allocates its result
// and nothing the size of the vocabulary. Rank 0 computes logprobs for
// every row that asks, every step; three vocabulary rows of garbage per
// token (384 KiB at 32768 tokens) made up most of what it allocated.
func TestLogprobsAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under -race")
	}
	logits := gaussRow(32768, 2, 3, 7)
	s := New(DefaultConfig())
	p := api.Params{Temperature: 0.7, LogitBias: map[int32]float32{10: 3}, RepetitionPenalty: 1.3, PresencePenalty: 0.5}
	row := Row{Logits: logits, Params: &p, EOS: -1, Prompt: []int32{1, 2, 3}, Output: []int32{10, 20}}
	first, err := s.Logprobs(row, 10, 20)
	if err != nil {
		t.Fatal(err)
	}
	if a := testing.AllocsPerRun(20, func() {
		lp, err := s.Logprobs(row, 10, 20)
		if err != nil || lp.Logprob != first.Logprob || lp.Rank != first.Rank || !slices.Equal(lp.Top, first.Top) {
			t.Fatalf("repeated call: %+v, %v; first %+v", lp, err, first)
		}
	}); a > 1 {
		t.Fatalf("%v allocations per call, want 1 (the top tokens)", a)
	}
}

func TestFastMath(t *testing.T) {
	for x := float32(-86); x <= 0; x += 0.001 {
		got, want := float64(fastExp(x)), math.Exp(float64(x))
		if math.Abs(got-want) > 3e-7*want {
			t.Fatalf("fastExp(%v) = %v want %v", x, got, want)
		}
	}
	if fastExp(-100) != 0 || fastExp(float32(math.Inf(-1))) != 0 {
		t.Fatal("fastExp underflow")
	}
}

func withAt(l []float32, i int, v float32) []float32 {
	c := append([]float32(nil), l...)
	c[i] = v
	return c
}

func allAt(n int, v float32) []float32 {
	c := make([]float32, n)
	for i := range c {
		c[i] = v
	}
	return c
}

func halfRow(l []float32) []uint16 {
	h := make([]uint16, len(l))
	for i, v := range l {
		h[i] = f16.Float32ToHalf(v)
	}
	return h
}

func bf16Row(l []float32) []uint16 {
	h := make([]uint16, len(l))
	for i, v := range l {
		h[i] = f16.Float32ToBFloat16(v)
	}
	return h
}

// randomAllow is a mask over vocab tokens keeping each token with
// probability 1/keepOneIn (at least one token kept), from a fixed seed.
func randomAllow(vocab, keepOneIn int, seed uint64) []uint64 {
	r := rand.New(rand.NewPCG(seed, 7))
	allow := make([]uint64, (vocab+63)/64)
	for i := range vocab {
		if r.IntN(keepOneIn) == 0 {
			allow[i/64] |= 1 << (i % 64)
		}
	}
	allow[0] |= 1
	return allow
}

// TestAllowMatchesFullRow: with a grammar's mask every path (inline, pool
// and bound noise, sparse and dense, float32 and half rows) returns exactly
// the full-row argmax over the allowed tokens, never a refused one. The
// masks are dense, sparse, whole words on and off, and shorter than the
// row (the tokens past its end are refused).
func TestAllowMatchesFullRow(t *testing.T) {
	logits := zipfRow(1000, 1.0, 8)
	half := make([]uint16, len(logits))
	for i, v := range logits {
		half[i] = f16.Float32ToHalf(v)
	}
	words := make([]uint64, 16)
	for i := range words {
		words[i] = [3]uint64{0, math.MaxUint64, 0x8000000000000001}[i%3]
	}
	masks := map[string][]uint64{
		"half": randomAllow(1000, 2, 1), "sparse": randomAllow(1000, 97, 2),
		"words": words, "short": randomAllow(300, 3, 3),
	}
	s, dense := New(DefaultConfig()), New(DefaultConfig())
	dense.denseOnly = true
	for mname, allow := range masks {
		for _, c := range exactCases() {
			t.Run(mname+"/"+c.name, func(t *testing.T) {
				p := c.params
				noise, bounds := make([]float32, len(logits)), make([]float32, len(logits))
				for d := range scale(40) {
					row := Row{Logits: logits, Params: &p, Prompt: c.prompt, Output: c.output, EOS: -1, NoiseKey: 9, NoiseRow: uint64(d), Allow: allow}
					if !slices.ContainsFunc(processed(row), func(v float32) bool { return v > float32(math.Inf(-1)) }) {
						var out [1]Result
						if s.Sample([]Row{row}, out[:]); !errors.Is(out[0].Err, ErrNoCandidates) {
							t.Fatalf("no token survives, yet got %+v", out[0])
						}
						return
					}
					want := fullRow(row)
					if allow[want/64]>>(want%64)&1 == 0 {
						t.Fatalf("the full row chose refused token %d", want)
					}
					hrow := row
					hrow.Logits, hrow.Logits16, hrow.Dtype = nil, half, Float16
					hconv := make([]float32, len(logits))
					convertRow(hconv, half, Float16)
					hwant := row
					hwant.Logits = hconv
					pooled, bounded := withPoolNoise(row, noise, bounds)
					var out [7]Result
					s.Sample([]Row{row, pooled, bounded, hrow}, out[:4])
					dense.Sample([]Row{row, pooled, bounded}, out[4:])
					for i, r := range out {
						w := want
						if i == 3 {
							w = fullRow(hwant)
						}
						if r.Err != nil || r.Token != w {
							t.Fatalf("draw %d, path %d: got %d %v, full row gives %d", d, i, r.Token, r.Err, w)
						}
					}
				}
			})
		}
	}
}

// TestAllowLeavesTheCallersRow: masking a float32 row works on a copy.
func TestAllowLeavesTheCallersRow(t *testing.T) {
	logits := gaussRow(500, 2, 2, 4)
	keep := slices.Clone(logits)
	p := api.Params{Temperature: 1}
	row := Row{Logits: logits, Params: &p, EOS: -1, Allow: randomAllow(500, 5, 9)}
	var out [1]Result
	New(DefaultConfig()).Sample([]Row{row}, out[:])
	if !slices.Equal(logits, keep) {
		t.Fatal("Sample changed the caller's logits")
	}
	if _, err := New(DefaultConfig()).Logprobs(row, out[0].Token, 3); err != nil || !slices.Equal(logits, keep) {
		t.Fatalf("Logprobs: %v, or it changed the caller's logits", err)
	}
}

// TestAllowIgnoresRefusedNaN: a NaN or +Inf in a token the mask refuses
// cannot matter (its logit is −Inf before anything else), on every path;
// in an allowed token it is still the row's error.
func TestAllowIgnoresRefusedNaN(t *testing.T) {
	logits := zipfRow(1000, 1.0, 5)
	allow := randomAllow(1000, 2, 6)
	bad := slices.Clone(logits)
	refused, allowedTok := -1, -1
	for i := range bad {
		switch {
		case allow[i/64]>>(i%64)&1 == 0 && refused < 0:
			refused = i
		case allow[i/64]>>(i%64)&1 == 1 && allowedTok < 0:
			allowedTok = i
		}
	}
	bad[refused] = float32(math.NaN())
	s := New(DefaultConfig())
	biased := map[int32]float32{int32(refused): 3} // an override on the refused NaN too
	for _, p := range []api.Params{{Temperature: 1}, {Temperature: 0}, {Temperature: 1, TopP: 0.9}, {Temperature: 1, LogitBias: biased}} {
		row := Row{Logits: bad, Params: &p, EOS: -1, NoiseKey: 3, Allow: allow}
		clean := row
		clean.Logits = logits
		var out [2]Result
		s.Sample([]Row{row, clean}, out[:])
		if out[0].Err != nil || out[0].Token != out[1].Token {
			t.Errorf("%+v: NaN in refused token %d: %+v, clean row %+v", p, refused, out[0], out[1])
		}
		bad2 := slices.Clone(logits)
		bad2[allowedTok] = float32(math.Inf(1))
		row.Logits = bad2
		s.Sample([]Row{row}, out[:1])
		if out[0].Err == nil {
			t.Errorf("%+v: +Inf in allowed token %d sampled %d", p, allowedTok, out[0].Token)
		}
	}
}

// TestAllowAgainstThePreference: a grammar that refuses what the model
// prefers (every allowed token 10 below the refused ones) over many
// blocks, so that the block bounds mislead and exactTop gives up its
// rounds for a masked pass: still exactly the full-row argmax.
func TestAllowAgainstThePreference(t *testing.T) {
	const vocab = 20000
	logits := zipfRow(vocab, 1.0, 12)
	allow := randomAllow(vocab, 3, 13)
	for i := range logits {
		if allow[i/64]>>(i%64)&1 == 1 {
			logits[i] -= 10
		}
	}
	s, dense := New(DefaultConfig()), New(DefaultConfig())
	dense.denseOnly = true
	noise, bounds := make([]float32, vocab), make([]float32, vocab)
	for _, p := range []api.Params{{Temperature: 1}, {Temperature: 0}, {Temperature: 0.7, LogitBias: map[int32]float32{5: 50}}} {
		for d := range scale(20) {
			row := Row{Logits: logits, Params: &p, EOS: -1, NoiseKey: 21, NoiseRow: uint64(d), Allow: allow}
			want := fullRow(row)
			pooled, bounded := withPoolNoise(row, noise, bounds)
			var out [4]Result
			s.Sample([]Row{row, pooled, bounded}, out[:3])
			dense.Sample([]Row{row}, out[3:])
			for i, r := range out {
				if r.Err != nil || r.Token != want {
					t.Fatalf("%+v draw %d path %d: got %d %v, full row gives %d", p, d, i, r.Token, r.Err, want)
				}
			}
		}
	}
}
