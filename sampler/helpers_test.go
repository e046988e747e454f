package sampler

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/noisepool"
)

// scale returns n, reduced for -short and -race runs (which also cover
// qemu-emulated s390x) so the package stays well inside its time budget.
func scale(n int) int {
	if testing.Short() {
		n /= 4
	}
	if raceEnabled {
		n /= 3
	}
	return max(n, 1)
}

// zChi is the standard normal quantile for a one-sided false-failure
// probability of 1e-6; every chi-square test below uses it.
const zChi = 4.7534

// chiCritical is the chi-square critical value for df degrees of freedom at
// false-failure probability 1e-6 (Wilson–Hilferty approximation, accurate
// to a few percent for df >= 1, which is far inside our margins).
func chiCritical(df int) float64 {
	d := float64(df)
	a := 2 / (9 * d)
	x := 1 - a + zChi*math.Sqrt(a)
	return d * x * x * x
}

// chiSquare tests counts against probabilities probs (indexed by token).
// Cells with expected count below 5 are pooled into one cell. It returns the
// statistic and the degrees of freedom. A token drawn with probability 0 is
// a hard failure.
func chiSquare(t *testing.T, counts map[int32]int, probs []float64, n int) {
	t.Helper()
	var stat, poolE float64
	var poolO, cells int
	for tok, c := range counts {
		if probs[tok] == 0 {
			t.Fatalf("token %d drawn %d times but has probability 0", tok, c)
		}
	}
	for tok, p := range probs {
		if p == 0 {
			continue
		}
		e := p * float64(n)
		o := counts[int32(tok)]
		if e < 5 {
			poolE += e
			poolO += o
			continue
		}
		stat += (float64(o) - e) * (float64(o) - e) / e
		cells++
	}
	if poolE > 0 {
		stat += (float64(poolO) - poolE) * (float64(poolO) - poolE) / poolE
		cells++
	}
	if cells < 2 {
		return
	}
	if crit := chiCritical(cells - 1); stat > crit {
		t.Fatalf("chi-square %.1f > %.1f (df %d, false-failure probability 1e-6)", stat, crit, cells-1)
	}
}

// draw samples n tokens from one logits row, noise row = draw index.
func draw(t *testing.T, s interface{ Sample([]Row, []Result) }, row Row, n int, key uint64, pool bool) map[int32]int {
	t.Helper()
	const batch = 64
	rows := make([]Row, batch)
	out := make([]Result, batch)
	var noise [][]float32
	if pool {
		noise = make([][]float32, batch)
		for i := range noise {
			noise[i] = make([]float32, row.Vocab())
		}
	}
	counts := map[int32]int{}
	for d := 0; d < n; d += batch {
		m := min(batch, n-d)
		for i := range m {
			rows[i] = row
			rows[i].NoiseKey, rows[i].NoiseRow = key, uint64(d+i)
			if pool {
				noisepool.FillRow(key, uint64(d+i), noise[i])
				rows[i].Noise = noise[i]
			}
		}
		s.Sample(rows[:m], out[:m])
		for _, r := range out[:m] {
			if r.Err != nil {
				t.Fatalf("draw: %v", r.Err)
			}
			counts[r.Token]++
		}
	}
	return counts
}

// processed applies the Allow mask and steps 1 to 4 in float32 exactly as documented, densely
// and independently of the sampler's sparse overrides.
func processed(row Row) []float32 {
	p := row.Params
	if p == nil {
		p = &defaultParams
	}
	l := make([]float32, row.Vocab())
	if row.Dtype == Float32 {
		copy(l, row.Logits)
	} else {
		convertRow(l, row.Logits16, row.Dtype)
	}
	inf := float32(math.Inf(-1))
	if row.Allow != nil {
		for i := range l {
			if i/64 >= len(row.Allow) || row.Allow[i/64]>>(i%64)&1 == 0 {
				l[i] = inf
			}
		}
	}
	if len(p.AllowedTokenIDs) > 0 {
		for i := range l {
			if !slices.Contains(p.AllowedTokenIDs, int32(i)) {
				l[i] = inf
			}
		}
	}
	for tok, b := range p.LogitBias {
		l[tok] = float32(l[tok] + b)
	}
	if len(row.Output) < p.MinTokens {
		for _, tok := range p.StopTokenIDs {
			l[tok] = inf
		}
		if row.EOS >= 0 {
			l[row.EOS] = inf
		}
	}
	rp := p.RepetitionPenalty
	for i := range l {
		c := 0
		for _, tok := range row.Output {
			if tok == int32(i) {
				c++
			}
		}
		if rp != 0 && rp != 1 && (c > 0 || slices.Contains(row.Prompt, int32(i))) {
			if l[i] > 0 {
				l[i] = float32(l[i] / rp)
			} else {
				l[i] = float32(l[i] * rp)
			}
		}
		if c > 0 && (p.FrequencyPenalty != 0 || p.PresencePenalty != 0) {
			l[i] = float32(l[i] - float32(p.FrequencyPenalty*float32(c)))
			l[i] = float32(l[i] - p.PresencePenalty)
		}
	}
	return l
}

// keptMask applies top-k, top-p and min-p with sorts, as documented, using
// the sampler's weight function, so it decides the same set bit for bit.
func keptMask(l []float32, p *api.Params) []bool {
	invT := float32(1 / float64(p.Temperature))
	idx := make([]int, 0, len(l))
	for i, v := range l {
		if v > float32(math.Inf(-1)) {
			idx = append(idx, i)
		}
	}
	slices.SortFunc(idx, func(a, b int) int {
		if c := cmp.Compare(l[b], l[a]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	n := len(idx)
	if p.TopK > 0 && p.TopK < n {
		vk := l[idx[p.TopK-1]]
		n = p.TopK
		for n < len(idx) && l[idx[n]] == vk {
			n++
		}
	}
	M := l[idx[0]]
	smax := float32(M * invT)
	if p.TopP > 0 && p.TopP < 1 {
		var z float64
		for _, i := range idx[:n] {
			z += float64(fastExp(float32(float32(l[i]*invT) - smax)))
		}
		var cum float64
		for j, i := range idx[:n] {
			cum += float64(fastExp(float32(float32(l[i]*invT) - smax)))
			if cum >= float64(p.TopP)*z {
				m := j + 1
				for m < n && l[idx[m]] == l[idx[j]] {
					m++
				}
				n = m
				break
			}
		}
	}
	keep := make([]bool, len(l))
	for _, i := range idx[:n] {
		if p.MinP > 0 && float64(float32(l[i]*invT))-float64(smax) < math.Log(float64(p.MinP)) {
			continue
		}
		keep[i] = true
	}
	return keep
}

// fullRow is the definition the sampler must reproduce bit for bit: the
// argmax over every kept token of float32(float32(l·invT) + Gumbel(key,row,i)),
// lowest index on ties.
func fullRow(row Row) int32 {
	p := row.Params
	if p == nil {
		p = &defaultParams
	}
	l := processed(row)
	if p.Temperature < api.GreedyBelow {
		return argmax(l)
	}
	keep := keptMask(l, p)
	invT := float32(1 / float64(p.Temperature))
	g := make([]float32, len(l))
	noisepool.FillRow(row.NoiseKey, row.NoiseRow, g)
	best, tau := int32(-1), float32(math.Inf(-1))
	for i, v := range l {
		if !keep[i] {
			continue
		}
		if sc := float32(float32(v*invT) + g[i]); sc > tau {
			best, tau = int32(i), sc
		}
	}
	return best
}

// targetProbs is the exact sampling distribution in float64.
func targetProbs(row Row) []float64 {
	p := row.Params
	l := processed(row)
	keep := keptMask(l, p)
	T := float64(p.Temperature)
	m := math.Inf(-1)
	for i, v := range l {
		if keep[i] {
			m = max(m, float64(v)/T)
		}
	}
	probs := make([]float64, len(l))
	var z float64
	for i, v := range l {
		if keep[i] {
			probs[i] = math.Exp(float64(v)/T - m)
			z += probs[i]
		}
	}
	for i := range probs {
		probs[i] /= z
	}
	return probs
}

// zipfRow is a long-tailed row: logit of token i is -s·ln(i+1) in a
// shuffled order, so block bounds are not trivially sorted.
func zipfRow(vocab int, s float64, seed uint64) []float32 {
	r := rand.New(rand.NewPCG(seed, 1))
	l := make([]float32, vocab)
	for i := range l {
		l[i] = float32(-s * math.Log(float64(i+1)))
	}
	r.Shuffle(len(l), func(i, j int) { l[i], l[j] = l[j], l[i] })
	return l
}

// gaussRow is an LLM-like row: a Gaussian bulk with a few strong tokens.
func gaussRow(vocab int, sigma float64, peaks int, seed uint64) []float32 {
	r := rand.New(rand.NewPCG(seed, 2))
	l := make([]float32, vocab)
	for i := range l {
		l[i] = float32(r.NormFloat64() * sigma)
	}
	for range peaks {
		l[r.IntN(vocab)] = float32(8 + r.Float64()*6)
	}
	return l
}

// blockMax is the pool's block maxima of a noise row.
func blockMax(noise []float32) []float32 {
	m := make([]float32, noisepool.BlockCount(len(noise)))
	noisepool.FillBlockMax(noise, m)
	return m
}

// withPoolNoise returns row with its noise as a pool hands it out: exact
// values and, as a bound row, upper bounds, each with block maxima. It
// fills noise and bounds (vocab long) for the row's key and counter.
func withPoolNoise(row Row, noise, bounds []float32) (pooled, bounded Row) {
	noisepool.FillRow(row.NoiseKey, row.NoiseRow, noise)
	noisepool.FillBoundRow(row.NoiseKey, row.NoiseRow, bounds)
	pooled, bounded = row, row
	pooled.Noise, pooled.NoiseBlockMax = noise, blockMax(noise)
	bounded.Noise, bounded.NoiseBound, bounded.NoiseBlockMax = bounds, true, blockMax(bounds)
	return pooled, bounded
}
