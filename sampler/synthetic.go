package sampler

import (
	"math"
	"math/rand/v2"
)

// SyntheticLogits returns a deterministic LLM-like logits row for
// benchmarks and tools: a Gaussian bulk (σ = 2.5) and a handful of strong
// tokens 12 to 20 above it, which is roughly the shape of a decoder's
// next-token logits.
func SyntheticLogits(vocab int, seed uint64) []float32 {
	r := rand.New(rand.NewPCG(seed, 0x5a4d))
	l := make([]float32, vocab)
	for i := range l {
		l[i] = float32(r.NormFloat64() * 2.5)
	}
	for range min(8, vocab) {
		l[r.IntN(vocab)] = float32(12 + 8*r.Float64())
	}
	return l
}

// ZipfLogits returns a long-tailed row, logit of the i-th most likely token
// −s·ln(i+1), shuffled: every token is within a few units of the top, the
// hardest case for noise-bound pruning.
func ZipfLogits(vocab int, s float64, seed uint64) []float32 {
	r := rand.New(rand.NewPCG(seed, 0x21bf))
	l := make([]float32, vocab)
	for i := range l {
		l[i] = float32(-s * math.Log(float64(i+1)))
	}
	r.Shuffle(len(l), func(i, j int) { l[i], l[j] = l[j], l[i] })
	return l
}
