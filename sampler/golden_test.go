package sampler

import (
	"encoding/binary"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/tpcoord/tpcoord/broadcast/api"
)

// goldenRow is an LLM-like row built with integer arithmetic only (no
// math.Log or math.Exp, whose last bits may differ between architectures),
// so every build samples the same logits: an Irwin–Hall bulk of σ ≈ 2.3,
// runs of −Inf, and peaks 6 to 14 above the bulk.
func goldenRow(vocab int, seed uint64) []float32 {
	r := rand.New(rand.NewPCG(seed, 0x601d))
	l := make([]float32, vocab)
	for i := range l {
		var sum int32
		for range 4 {
			sum += int32(r.Uint32()>>12) - 1<<19 // 20-bit uniforms; the sum is exact in float32
		}
		l[i] = float32(sum) * 0x1p-18
	}
	for range 12 {
		l[r.IntN(vocab)] = float32(6+r.IntN(9)) + float32(r.IntN(16))*0.0625
	}
	for i := r.IntN(vocab); i < vocab && r.IntN(40) != 0; i++ {
		l[i] = float32(math.Inf(-1))
	}
	return l
}

// goldenCases are the sampling modes whose draws TestGoldenDraws pins.
func goldenCases() []struct {
	name string
	p    api.Params
} {
	plain := func(T float32) api.Params { return api.Params{Temperature: T} }
	return []struct {
		name string
		p    api.Params
	}{
		{"plain 0.8", plain(0.8)},
		{"plain 2", plain(2)},
		{"topk 50", api.Params{Temperature: 0.8, TopK: 50}},
		{"topk 1000", api.Params{Temperature: 1.5, TopK: 1000}},
		{"topp 0.9", api.Params{Temperature: 0.8, TopP: 0.9}},
		{"topp 0.5 T3", api.Params{Temperature: 3, TopP: 0.5}},
		{"topp 0.95 T1.5", api.Params{Temperature: 1.5, TopP: 0.95}},
		{"topk topp", api.Params{Temperature: 0.8, TopK: 50, TopP: 0.9}},
		{"minp 0.05", api.Params{Temperature: 0.8, MinP: 0.05}},
		{"greedy", api.Params{}},
		{"penalties bias", api.Params{Temperature: 1, RepetitionPenalty: 1.3, FrequencyPenalty: 0.5, PresencePenalty: 0.4,
			LogitBias: map[int32]float32{7: 9, 8: -100, 4000: 3}}},
		{"penalties topk topp", api.Params{Temperature: 1, TopK: 40, TopP: 0.8, RepetitionPenalty: 1.2, LogitBias: map[int32]float32{5: 12}}},
		{"allowed", api.Params{Temperature: 1, AllowedTokenIDs: []int32{3, 17, 400, 401, 999, 20000}}},
	}
}

// TestGoldenDraws pins the tokens drawn for seeded rows in every sampling
// mode, with pool and with inline noise (and checks that bound pool rows
// draw the same). The hashes were produced on amd64
// with the AVX-512 kernels; the purego build (the portable kernels) and
// s390x under qemu (big-endian, another FPU; scripts/test.sh) must draw the
// very same tokens, and so must any change to the sampler's algorithms.
func TestGoldenDraws(t *testing.T) {
	const vocab, draws = 100352, 8
	rows := [][]float32{goldenRow(vocab, 1), goldenRow(vocab, 2), SyntheticLogits(vocab, 3)}
	s := New(DefaultConfig())
	noise, bounds := make([]float32, vocab), make([]float32, vocab)
	for _, c := range goldenCases() {
		h := fnv.New64a()
		distinct := map[int32]bool{}
		for ri, logits := range rows {
			for d := range draws {
				row := Row{Logits: logits, Params: &c.p, EOS: 11, NoiseKey: uint64(100*ri + 1), NoiseRow: uint64(d),
					Prompt: []int32{7, 9, 4000}, Output: []int32{9, 9, 12, 7}}
				pooled, bounded := withPoolNoise(row, noise, bounds)
				var out [3]Result
				s.Sample([]Row{row, pooled, bounded}, out[:])
				for _, r := range out[:2] {
					if r.Err != nil {
						t.Fatalf("%s row %d draw %d: %v", c.name, ri, d, r.Err)
					}
					h.Write(binary.LittleEndian.AppendUint32(nil, uint32(r.Token)))
					distinct[r.Token] = true
				}
				if out[0].Token != out[1].Token || out[0].Token != out[2].Token {
					t.Fatalf("%s row %d draw %d: inline %d, pool %d, bound pool %d %v", c.name, ri, d, out[0].Token, out[1].Token, out[2].Token, out[2].Err)
				}
			}
		}
		if got, want := h.Sum64(), goldenDraws[c.name]; got != want {
			t.Errorf("%s: draws hash %#x, want %#x (%d distinct tokens)", c.name, got, want, len(distinct))
		}
	}
}

var goldenDraws = map[string]uint64{
	"plain 0.8":           0xa8833a23d1e6adc9,
	"plain 2":             0x1386da97f0789fd5,
	"topk 50":             0x11151a1130d17a59,
	"topk 1000":           0xccb3af7b41aaee39,
	"topp 0.9":            0x11151a1130d17a59,
	"topp 0.5 T3":         0x9fab2ec5873ddd5,
	"topp 0.95 T1.5":      0xafa7214ea823a285,
	"topk topp":           0x1df63d1da2a557f5,
	"minp 0.05":           0x7c83e3c2e877a15d,
	"greedy":              0x6df6c79c750016c5,
	"penalties bias":      0x41c8eacc7a5e31f1,
	"penalties topk topp": 0xe3da8330837af049,
	"allowed":             0xad0ddeb8409b12a1,
}
