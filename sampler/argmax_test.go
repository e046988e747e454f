package sampler

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/noisepool"
)

// adversarialRow returns a logits row of the given kind: ties, all-equal
// rows, −Inf runs, one token far above the rest (whole blocks skipped),
// signed zeros and denormals, huge magnitudes.
func adversarialRow(kind string, vocab int, r *rand.Rand) []float32 {
	l := make([]float32, vocab)
	ninf := float32(math.Inf(-1))
	for i := range l {
		switch kind {
		case "ties":
			l[i] = []float32{-1, 0, 2, 2.5, 2.5}[r.IntN(5)]
		case "equal":
			l[i] = 7
		case "neginf":
			l[i] = float32(r.NormFloat64() * 3)
			if r.IntN(3) != 0 {
				l[i] = ninf
			}
		case "gap":
			l[i] = float32(r.NormFloat64() * 2)
		case "zeros":
			l[i] = []float32{0, float32(math.Copysign(0, -1)), math.Float32frombits(1), math.Float32frombits(0x80000001)}[r.IntN(4)]
		case "huge":
			l[i] = float32(r.NormFloat64() * 1e30)
		}
	}
	switch kind {
	case "gap": // one token 10 to 40 above a bulk, and its tie at the far end
		t := r.IntN(vocab)
		l[t] = float32(10 + 30*r.Float64())
		l[vocab-1] = l[t]
	case "neginf": // all −Inf but one
		if r.IntN(4) == 0 {
			for i := range l {
				l[i] = ninf
			}
			l[r.IntN(vocab)] = 1
		}
		if slices.Max(l) == ninf { // keep one candidate: an all-masked row is an error
			l[r.IntN(vocab)] = -1
		}
	}
	return l
}

// TestPrunedArgmaxMatchesFullRow: with adversarial rows, vocabularies that
// are not multiples of the block size, and temperatures from near-greedy to
// 10^4, the pruned paths (inline and pool noise; the sparse paths and, with
// them turned off, the dense ones) return exactly the full-row argmax for
// every seeded noise row.
func TestPrunedArgmaxMatchesFullRow(t *testing.T) {
	kinds := []string{"ties", "equal", "neginf", "gap", "zeros", "huge"}
	vocabs := []int{1, 2, 3, 17, 255, 256, 257, 511, 769, 1000}
	temps := []float32{2e-5, 1e-3, 0.05, 0.3, 1, 3, 100, 1e4}
	modes := []api.Params{{}, {MinP: 0.1}, {TopP: 0.9}, {TopK: 3}, {TopK: 20, TopP: 0.5}}
	draws := scale(6)
	r := rand.New(rand.NewPCG(18, 5))
	s, dense := New(DefaultConfig()), New(DefaultConfig())
	dense.denseOnly = true
	rows := 0
	for _, kind := range kinds {
		for _, vocab := range vocabs {
			logits := adversarialRow(kind, vocab, r)
			noise, bounds := make([]float32, vocab), make([]float32, vocab)
			for _, T := range temps {
				if kind == "huge" && T < 1 {
					continue // l/T overflows: that path returns the argmax, not a draw
				}
				for _, m := range modes {
					p := m
					p.TopK = min(p.TopK, vocab)
					p.Temperature = T
					for d := range draws {
						row := Row{Logits: logits, Params: &p, EOS: -1, NoiseKey: r.Uint64(), NoiseRow: uint64(d)}
						want := fullRow(row)
						pooled, bounded := withPoolNoise(row, noise, bounds)
						var out [6]Result
						s.Sample([]Row{row, pooled, bounded}, out[:3])
						dense.Sample([]Row{row, pooled, bounded}, out[3:])
						for i, res := range out {
							if res.Err != nil || res.Token != want {
								t.Fatalf("%s vocab %d T %v %+v key %d row %d (noise %s, dense=%v): got %d %v, full row gives %d",
									kind, vocab, T, m, row.NoiseKey, d, [3]string{"inline", "pool", "bound"}[i%3], i >= 3, res.Token, res.Err, want)
							}
						}
						rows++
					}
				}
			}
		}
	}
	t.Logf("%d rows, each sampled with inline and pool noise, sparse and dense", rows)
}

// TestLogitCutIsExact: logitCut is the smallest logit whose best possible
// score reaches tau, with the sampler's own rounding.
func TestLogitCutIsExact(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	gMax := noisepool.MaxGumbel
	for n := range 20000 {
		invT := float32(math.Exp(r.Float64()*20 - 10))
		M := float32(r.NormFloat64() * math.Pow(10, float64(r.IntN(8))))
		if math.IsInf(float64(float32(M*invT)), 0) {
			continue
		}
		// tau is a score the sampler can hold: some noise value added to M's.
		tau := float32(float32(M*invT) + noisepool.GumbelFromBits(r.Uint32()))
		if n%7 == 0 {
			tau = float32(float32(M*invT) + gMax) // the boundary case: only l = M may reach it
		}
		c := logitCut(M, invT, gMax, tau)
		ok := func(l float32) bool { return float32(float32(l*invT)+gMax) >= tau }
		if !ok(c) && !math.IsInf(float64(c), -1) {
			t.Fatalf("M %v invT %v tau %v: cut %v cannot reach tau", M, invT, tau, c)
		}
		if below := fromOrderedKey(orderedKey(c) - 1); !math.IsInf(float64(c), -1) && c > -math.MaxFloat32 && ok(below) {
			t.Fatalf("M %v invT %v tau %v: cut %v, but %v below it reaches tau", M, invT, tau, c, below)
		}
		if c > M {
			t.Fatalf("M %v invT %v tau %v: cut %v above M", M, invT, tau, c)
		}
	}
	if c := logitCut(1, 1e-30, gMax, -1e9); !math.IsInf(float64(c), -1) {
		t.Fatalf("a tau every logit reaches gives cut %v, want -Inf", c)
	}
}

// TestPrunedArgmaxNearMaxNoise: token 739 of (key 77, row 1806839) has
// noise 21.26, within 1.7 of the generator's maximum (found by a search
// over rows). Its logit is set so that it wins by 0.26 over the maximum
// token: any bound on the noise tighter than the generator's true range
// (or a rounding slip in the cut) would skip it. Random rows cannot test
// this: noise above 20 comes once in 5·10^8 tokens.
func TestPrunedArgmaxNearMaxNoise(t *testing.T) {
	const key, noiseRow, hot, top = 77, 1806839, 739, 100
	if g := noisepool.Gumbel(key, noiseRow, hot); g < 21 {
		t.Fatalf("noise of token %d is %v, the test needs > 21", hot, g)
	}
	r := rand.New(rand.NewPCG(3, 3))
	logits := make([]float32, 1000)
	for i := range logits {
		logits[i] = float32(r.NormFloat64())
	}
	logits[top] = 30
	tau := float32(30 + noisepool.Gumbel(key, noiseRow, top))
	logits[hot] = tau - 21
	noise := make([]float32, len(logits))
	noisepool.FillRow(key, noiseRow, noise)
	s := New(DefaultConfig())
	for _, p := range []api.Params{{Temperature: 1}, {Temperature: 1, MinP: 1e-12}} {
		row := Row{Logits: logits, Params: &p, EOS: -1, NoiseKey: key, NoiseRow: noiseRow}
		if want := fullRow(row); want != hot {
			t.Fatalf("%+v: full row gives %d, the test expects token %d to win", p, want, hot)
		}
		pooled := row
		pooled.Noise = noise
		var out [2]Result
		s.Sample([]Row{row, pooled}, out[:])
		for i, res := range out {
			if res.Err != nil || res.Token != hot {
				t.Fatalf("%+v (pool=%v): got %d %v, full row gives %d", p, i == 1, res.Token, res.Err, hot)
			}
		}
	}
}

// TestBlockMaxKeepsTies: a block whose best possible score (largest logit
// plus largest noise) only equals the running best is still read, since
// a tie goes to the lowest index. Token 5 (block 0) scores 1 + 3 and token
// 300 (block 1, the largest logit) 2 + 2.
func TestBlockMaxKeepsTies(t *testing.T) {
	const vocab = 600
	logits, noise := make([]float32, vocab), make([]float32, vocab)
	for i := range logits {
		logits[i], noise[i] = -100, -1
	}
	logits[5], noise[5] = 1, 3
	logits[300], noise[300] = 2, 2
	p := api.Params{Temperature: 1}
	row := Row{Logits: logits, Params: &p, EOS: -1, Noise: noise, NoiseBlockMax: blockMax(noise)}
	s, dense := New(DefaultConfig()), New(DefaultConfig())
	dense.denseOnly = true
	var out [2]Result
	s.Sample([]Row{row}, out[:1])
	dense.Sample([]Row{row}, out[1:])
	for i, r := range out {
		if r.Err != nil || r.Token != 5 {
			t.Errorf("dense=%v: token %d %v, want 5 (the lower index of a tie)", i == 1, r.Token, r.Err)
		}
	}
}
