package sampler

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/noisepool"
)

// sparseRow returns a row of one of the shapes the sparse paths must get
// right: LLM-like (a Gaussian bulk and strong tokens), long-tailed,
// sorted (evenly spaced samples then misjudge nothing, but a clustered
// top sits in a few blocks), all equal, ties at the top, mostly −Inf.
func sparseRow(kind string, vocab int, r *rand.Rand) []float32 {
	l := make([]float32, vocab)
	for i := range l {
		l[i] = float32(r.NormFloat64() * 2.5)
	}
	switch kind {
	case "llm":
		for range 8 {
			l[r.IntN(vocab)] = float32(12 + 8*r.Float64())
		}
	case "zipf":
		for i := range l {
			l[i] = float32(-math.Log(float64(i + 1)))
		}
		r.Shuffle(vocab, func(i, j int) { l[i], l[j] = l[j], l[i] })
	case "sorted":
		slices.Sort(l)
	case "equal":
		for i := range l {
			l[i] = 3
		}
	case "ties":
		for i := range l {
			l[i] = float32(r.IntN(6)) * 0.5
		}
	case "neginf":
		for i := range l {
			if r.IntN(10) != 0 {
				l[i] = float32(math.Inf(-1))
			}
		}
		l[r.IntN(vocab)] = 1
	}
	return l
}

// sparseParams are the modes the sparse paths take, at temperatures from
// near-greedy to flat.
func sparseParams() []api.Params {
	var ps []api.Params
	for _, T := range []float32{0.05, 0.8, 3} {
		ps = append(ps,
			api.Params{Temperature: T}, api.Params{Temperature: T, TopK: 1}, api.Params{Temperature: T, TopK: 50},
			api.Params{Temperature: T, TopK: 2000}, api.Params{Temperature: T, TopP: 0.1}, api.Params{Temperature: T, TopP: 0.9},
			api.Params{Temperature: T, TopP: 0.999999}, api.Params{Temperature: T, MinP: 0.05},
			api.Params{Temperature: T, TopK: 50, TopP: 0.9}, api.Params{Temperature: T, TopP: 0.95, MinP: 0.01})
	}
	return append(ps, api.Params{}, api.Params{TopK: 5})
}

// trySparse runs sampleRow's steps up to the sparse dispatch.
func trySparse(t *testing.T, s *Sampler, r *Row) (int32, bool, error) {
	t.Helper()
	base := s.baseRow(r)
	s.grow(len(base))
	if err := s.buildOverrides(r, r.Params, base); err != nil {
		t.Fatal(err)
	}
	nb := (len(base) + blockSize - 1) / blockSize
	s.indexOverrides(len(base), nb)
	return s.sampleSparse(r, r.Params, base, nb)
}

// TestSparseMatchesDense: whenever a sparse path decides a row, with pool
// noise, inline noise or a pool row of few distinct values (so scores tie
// and the lowest index must win), with or without logit bias and
// penalties (overrides that move tokens across the sampled cut), its token
// is the dense path's; and on LLM-like rows the sparse paths do decide
// almost every row, so the comparison is not vacuous.
func TestSparseMatchesDense(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 42))
	s, dense := New(DefaultConfig()), New(DefaultConfig())
	dense.denseOnly = true
	decided, llmRows, llmDecided := 0, 0, 0
	for _, kind := range []string{"llm", "zipf", "sorted", "equal", "ties", "neginf"} {
		for _, vocab := range []int{3001, 20000} {
			logits := sparseRow(kind, vocab, r)
			noise, tied, bounds := make([]float32, vocab), make([]float32, vocab), make([]float32, vocab)
			for i := range tied {
				tied[i] = float32(r.IntN(3)) * 0.5
			}
			for pi, p := range sparseParams() {
				for _, override := range []bool{false, true} {
					p := p
					if override {
						p.LogitBias = map[int32]float32{int32(r.IntN(vocab)): 40, int32(r.IntN(vocab)): -40}
						p.RepetitionPenalty = 1.5
					}
					key := r.Uint64()
					row := Row{Logits: logits, Params: &p, EOS: -1, NoiseKey: key, NoiseRow: 3, Output: []int32{int32(r.IntN(vocab))}}
					noisepool.FillRow(key, 3, noise)
					noisepool.FillBoundRow(key, 3, bounds)
					for pool, nz := range [][]float32{nil, noise, tied, bounds} {
						row.Noise, row.NoiseBound, row.NoiseBlockMax = nz, pool == 3, nil
						if pool == 3 {
							row.NoiseBlockMax = blockMax(nz)
						}
						var want [1]Result
						dense.Sample([]Row{row}, want[:])
						tok, ok, err := trySparse(t, s, &row)
						if kind == "llm" {
							llmRows++
						}
						if !ok {
							continue
						}
						decided++
						if kind == "llm" {
							llmDecided++
						}
						if err != nil || want[0].Err != nil || tok != want[0].Token {
							t.Fatalf("%s vocab %d params #%d %+v noise #%d: sparse %d %v, dense %d %v",
								kind, vocab, pi, p, pool, tok, err, want[0].Token, want[0].Err)
						}
					}
				}
			}
		}
	}
	t.Logf("sparse paths decided %d rows; LLM-like: %d of %d", decided, llmDecided, llmRows)
	// Inline plain rows are dense by design (1 params set in 10, per T).
	if llmDecided < llmRows*8/10 {
		t.Fatalf("the sparse paths decided only %d of %d LLM-like rows", llmDecided, llmRows)
	}
}

// TestSparseNucleusMatchesDense: for cuts t from a few tokens to most of
// the row, whenever sparseNucleus decides, its floor is nucleusFloor's; it
// decides with the first bound and with the counted band (both happen).
func TestSparseNucleusMatchesDense(t *testing.T) {
	r := rand.New(rand.NewPCG(43, 44))
	s := New(DefaultConfig())
	first, band, total := 0, 0, 0
	for _, kind := range []string{"llm", "zipf", "ties", "sorted"} {
		for _, vocab := range []int{1000, 7000} {
			l := sparseRow(kind, vocab, r)
			nb := (vocab + blockSize - 1) / blockSize
			s.grow(vocab)
			s.ov = s.ov[:0]
			s.indexOverrides(vocab, nb)
			if err := s.blockBounds(l, nb); err != nil {
				t.Fatal(err)
			}
			sorted := slices.Sorted(slices.Values(l))
			for _, T := range []float32{0.3, 0.8, 2} {
				for _, topP := range []float32{0.1, 0.5, 0.9, 0.99} {
					invT := float32(1 / float64(T))
					M := sorted[vocab-1]
					want := s.nucleusFloor(l, nb, M, invT, topP)
					for _, n := range []int{1, 3, 10, 30, 100, 300, vocab / 2} {
						c := sparseCase{s: s, l: l, nb: nb, t: sorted[vocab-n], M: M, invT: invT, topP: topP}
						got, ok, byFirst := c.run(t)
						total++
						if !ok {
							continue
						}
						if byFirst {
							first++
						} else {
							band++
						}
						if got != want {
							t.Fatalf("%s vocab %d T %v p %v cut %v (%d above): sparse floor %v, dense %v", kind, vocab, T, topP, c.t, n, got, want)
						}
					}
				}
			}
		}
	}
	t.Logf("%d cases: %d decided by the first bound, %d by the band", total, first, band)
	if first == 0 || band == 0 {
		t.Fatalf("first bound decided %d, band %d: both paths must be exercised", first, band)
	}
}

type sparseCase struct {
	s                *Sampler
	l                []float32
	nb               int
	t, M, invT, topP float32
}

// run gathers at t and asks sparseNucleus, and reports whether the first
// bound alone would have decided.
func (c sparseCase) run(t *testing.T) (float32, bool, bool) {
	t.Helper()
	if !c.s.gatherAbove(c.l, c.nb, c.t) {
		t.Fatal("gather failed on a finite row")
	}
	got, ok := c.s.sparseNucleus(c.l, c.nb, c.t, c.M, c.invT, c.topP)
	if !ok {
		return 0, false, false
	}
	// Replay the first bound alone.
	_, bh := nucleusHead(len(c.l), c.invT, c.topP)
	known := min(bh+1, math.Float32bits(float32(c.M-c.t))>>massShift)
	K := c.s.headWeights(c.M, c.invT, known)
	smax := float32(c.M * c.invT)
	u := float64(len(c.l) - len(c.s.cands))
	wt := math.Exp(float64(float32(float32(c.t*c.invT)-smax))) * (1 + 1e-5)
	rel := float64(len(c.l)+16) * 0x1p-52
	_, byFirst := c.s.nucleusBetween(K*(1-rel), (K+u*wt)*(1+rel), c.M, c.topP, known)
	return got, true, byFirst
}

// TestGatherAndCount: gatherAbove and countAbove against brute force, with
// special values planted next to the cut and overrides in some blocks.
func TestGatherAndCount(t *testing.T) {
	r := rand.New(rand.NewPCG(45, 46))
	s := New(DefaultConfig())
	for _, vocab := range []int{1, 7, 8, 9, 255, 256, 257, 1000} {
		l := randRow(vocab, r)
		cut := l[r.IntN(vocab)]
		if cut == float32(math.Inf(-1)) {
			cut = 0.5
		}
		for _, x := range []float32{cut, float32(math.Nextafter32(cut, 10)), float32(math.Nextafter32(cut, -10)), 0, float32(math.Copysign(0, -1)), math.Float32frombits(1)} {
			l[r.IntN(vocab)] = x
		}
		p := api.Params{Temperature: 1, LogitBias: map[int32]float32{int32(r.IntN(vocab)): 3, int32(r.IntN(vocab)): -3}}
		row := Row{Logits: l, Params: &p, EOS: -1}
		s.grow(vocab)
		if err := s.buildOverrides(&row, &p, l); err != nil {
			t.Fatal(err)
		}
		nb := (vocab + blockSize - 1) / blockSize
		s.indexOverrides(vocab, nb)
		proc := processed(row)
		for _, t2 := range []float32{cut, cut - 1, float32(math.Inf(-1)), -1e30} {
			if !s.gatherAbove(l, nb, t2) {
				t.Fatalf("vocab %d: gather failed", vocab)
			}
			var want []cand
			above := 0
			for i, v := range proc {
				if v >= t2 && v > float32(math.Inf(-1)) {
					want = append(want, cand{idx: int32(i), l: v})
				}
				if v > t2 {
					above++
				}
			}
			if (len(want) != 0 || len(s.cands) != 0) && !slices.Equal(s.cands, want) {
				t.Fatalf("vocab %d cut %v: gathered %v, want %v", vocab, t2, s.cands, want)
			}
			if got := s.countAbove(l, nb, t2); t2 > float32(math.Inf(-1)) && got != above {
				t.Fatalf("vocab %d: %d above %v, want %d", vocab, got, t2, above)
			}
		}
		s.ov = s.ov[:0] // the planted value must not sit under an override
		s.indexOverrides(vocab, nb)
		for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1))} {
			old := l[vocab/2]
			l[vocab/2] = bad
			if s.gatherAbove(l, nb, cut) {
				t.Fatalf("vocab %d: gather accepted %v", vocab, bad)
			}
			l[vocab/2] = old
		}
	}
}

// TestLargest: sampleCut's top-q selection equals quickselect, ties
// included.
func TestLargest(t *testing.T) {
	r := rand.New(rand.NewPCG(47, 48))
	var top [32]float32
	for n := 1; n < 300; n += 7 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(r.IntN(20)) - 10
		}
		for q := 1; q <= min(n, len(top)); q++ {
			want := kthLargest(slices.Clone(v), q)
			if got := largest(v, top[:q]); got != want {
				t.Fatalf("n %d q %d: %v, quickselect %v (%v)", n, q, got, want, v)
			}
		}
	}
}

// TestSampleCut: a cut from a row that is all NaN or −Inf is −Inf, and the
// guess lands near the asked-for count on a Gaussian row.
func TestSampleCut(t *testing.T) {
	s := New(DefaultConfig())
	nan := allAt(5000, float32(math.NaN()))
	if c := s.sampleCut(nan, 100); !math.IsInf(float64(c), -1) {
		t.Fatalf("all-NaN row: cut %v", c)
	}
	r := rand.New(rand.NewPCG(49, 50))
	l := sparseRow("gauss", 100352, r)
	c := s.sampleCut(l, 1000)
	n := 0
	for _, v := range l {
		if v >= c {
			n++
		}
	}
	if n < 250 || n > 4000 {
		t.Fatalf("asked for about 1000 tokens above the cut, got %d", n)
	}
	t.Logf("cut %v: %d tokens at or above", c, n)
}
