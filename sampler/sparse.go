package sampler

import (
	"cmp"
	"math"
	"slices"

	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/noisepool"
)

// The sparse paths. The dense path reads every token in several passes
// (block maxima, then weights or scores), but in every mode except plain
// sampling the tokens that matter are the few with the largest logits, and
// plain sampling with pool noise needs only one pass. So, before any block
// maximum is computed:
//
//   - plain with pool noise: one pass computes every score and keeps the
//     running best (plainPool); a new best is rare after the first tokens,
//     so its compare is a branch that is almost never taken.
//   - top-k, top-p, min-p, greedy: sampleCut guesses from a sample of the
//     row a logit t that a few hundred tokens reach, and gatherAbove collects
//     every token with l >= t in one pass whose only per-token work is one
//     compare (again a branch that is almost never taken). The mode then
//     checks that the gathered tokens provably hold every token it needs:
//     top-k needs at least k of them; top-p needs the nucleus boundary among
//     them and a bound on the weight of the rest tight enough to fix it
//     (sparseNucleus); min-p needs its floor at or above t.
//
// When a check fails (a guess too high, a boundary too close to call, a NaN
// or +Inf logit) the dense path decides, so the token never depends on the
// guess; TestSparseMatchesDense compares the two on adversarial rows.

// sampleSize is how many tokens sampleCut reads, in runs of sampleRun.
const sampleSize, sampleRun = 1024, 4

// bandNats is how far below the gather's cut t, in weight (logit/T), top-p
// counts the tokens it did not gather when it needs a tighter bound: those
// above t2 = t - bandNats·T are bounded by the weight at t, the others by
// the weight at t2, e^bandNats times smaller.
const bandNats = 3

// sparseWant is how many tokens sampleCut aims to have at or above its
// guess: enough that the mode's checks rarely fail, few enough that the
// gather branch is rarely taken.
const sparseWant = 256

// preferSparse reports whether the sparse paths are the faster way to
// sample a row with parameters p: always with the portable kernels. With
// the vector kernels (amd64) one vector block-max pass is cheaper than the
// scalar gather, which makes the dense plain, top-k, min-p and greedy
// paths the faster ones (measured end to end with tpcoord bench sampler);
// top-p alone still goes sparse, since its dense path weighs every token.
func preferSparse(p *api.Params, vocab int) bool {
	if !active.vector {
		return true
	}
	topK := p.TopK > 0 && p.TopK < vocab
	return p.TopP > 0 && p.TopP < 1 && !topK && p.Temperature >= api.GreedyBelow
}

// sampleSparse samples the row by a sparse path if one applies and its
// checks hold; ok is false when the dense path must decide.
func (s *Sampler) sampleSparse(r *Row, p *api.Params, base []float32, nb int) (tok int32, ok bool, err error) {
	vocab := len(base)
	greedy := p.Temperature < api.GreedyBelow
	topK := p.TopK > 0 && p.TopK < vocab
	topP := p.TopP > 0 && p.TopP < 1
	if !greedy && !topK && !topP && !(p.MinP > 0) {
		if r.Noise == nil {
			return 0, false, nil
		}
		tok, ok := s.plainPool(r, base, nb, float32(1/float64(p.Temperature)))
		return tok, ok, nil
	}
	want := sparseWant
	switch {
	case greedy:
	case topK:
		want += 3 * p.TopK
	case topP:
		want *= 2 // a tighter bound on the weight of the rest
	}
	t := s.sampleCut(base, want)
	if !s.gatherAbove(base, nb, t) || len(s.cands) == 0 {
		return 0, false, nil
	}
	M, t0 := candsTop(s.cands)
	if greedy {
		return t0, true, nil
	}
	invT := float32(1 / float64(p.Temperature))
	if math.IsInf(float64(float32(M*invT)), 1) {
		return t0, true, nil // l/T overflows: the T -> 0 limit is the argmax
	}
	if topK {
		if len(s.cands) < p.TopK {
			return 0, false, nil
		}
		s.keepTopK(p.TopK)
		tok, err := s.sampleList(r, p, invT)
		return tok, true, err
	}
	return s.sparseFloor(r, p, base, nb, t, M, invT)
}

// sparseFloor samples a top-p and/or min-p row from the gathered tokens
// (every token with l >= t), if the floor provably lies at or above t.
func (s *Sampler) sparseFloor(r *Row, p *api.Params, base []float32, nb int, t, M, invT float32) (int32, bool, error) {
	floor := float32(math.Inf(-1))
	if p.TopP > 0 && p.TopP < 1 {
		f, ok := s.sparseNucleus(base, nb, t, M, invT, p.TopP)
		if !ok {
			return 0, false, nil
		}
		floor = f
	}
	if p.MinP > 0 {
		floor = max(floor, minPFloor(M, invT, p.MinP))
	}
	if !(floor >= t) {
		return 0, false, nil // a kept token may lie below t
	}
	return s.argmaxCands(r, invT, floor)
}

// sampleCut returns a guess of a logit that about want tokens of the row
// reach: the q-th largest of up to sampleSize logits read in runs of
// sampleRun neighbours evenly spaced over the row (a quarter of the cache
// lines that single tokens would touch), with q the sample's share of
// want. Only a guess: the callers check what they get.
func (s *Sampler) sampleCut(base []float32, want int) float32 {
	n := len(base)
	step := max(sampleRun, n/(sampleSize/sampleRun))
	s.sel = s.sel[:0]
	for i := 0; i < n; i += step {
		for _, x := range base[i:min(i+sampleRun, n)] {
			if x == x {
				s.sel = append(s.sel, x)
			}
		}
	}
	if len(s.sel) == 0 {
		return float32(math.Inf(-1))
	}
	q := min(len(s.sel), max(1, int(int64(want)*int64(len(s.sel))/int64(n))))
	if q > len(s.top) {
		return kthLargest(s.sel, q)
	}
	return largest(s.sel, s.top[:q])
}

// largest returns the len(top)-th largest value of v (len(v) >= len(top)),
// keeping the largest seen so far in top, in descending order: after the
// first few values a new one rarely enters, so the compare is a branch
// that is almost never taken (quickselect's partition mispredicts half its
// compares).
func largest(v, top []float32) float32 {
	q := len(top)
	copy(top, v[:q])
	slices.SortFunc(top, func(a, b float32) int { return cmp.Compare(b, a) })
	for _, x := range v[q:] {
		if x > top[q-1] {
			j := q - 1
			for ; j > 0 && x > top[j-1]; j-- {
				top[j] = top[j-1]
			}
			top[j] = x
		}
	}
	return top[q-1]
}

// gatherAbove sets s.cands to every token whose processed logit l is finite
// and at least t, in index order. It reports false if the row holds a NaN
// or +Inf (the dense path reports which token).
func (s *Sampler) gatherAbove(base []float32, nb int, t float32) bool {
	s.cands = s.cands[:0]
	for b := range nb {
		vals := s.blockVals(base, b)
		lo := b << blockShift
		i := 0
		for ; i+8 <= len(vals); i += 8 {
			x := vals[i : i+8 : i+8]
			// !(x < t): true for x >= t and for NaN, both rare.
			if !(x[0] < t) || !(x[1] < t) || !(x[2] < t) || !(x[3] < t) ||
				!(x[4] < t) || !(x[5] < t) || !(x[6] < t) || !(x[7] < t) {
				if !s.gatherGroup(x, lo+i, t) {
					return false
				}
			}
		}
		if !s.gatherGroup(vals[i:], lo+i, t) {
			return false
		}
	}
	return true
}

// countAbove returns how many processed logits exceed t2, counted without
// a branch: the sign of t2 - l, which is never -0 (a nonzero difference
// does not round to zero). NaN is not expected (the gather saw none); −Inf
// may count either way, harmless for sparseNucleus (its weight is 0).
func (s *Sampler) countAbove(base []float32, nb int, t2 float32) int {
	n := uint32(0)
	for b := range nb {
		vals := s.blockVals(base, b)
		i := 0
		for ; i+8 <= len(vals); i += 8 {
			x := vals[i : i+8 : i+8]
			n += math.Float32bits(t2-x[0])>>31 + math.Float32bits(t2-x[1])>>31 +
				math.Float32bits(t2-x[2])>>31 + math.Float32bits(t2-x[3])>>31 +
				math.Float32bits(t2-x[4])>>31 + math.Float32bits(t2-x[5])>>31 +
				math.Float32bits(t2-x[6])>>31 + math.Float32bits(t2-x[7])>>31
		}
		for _, x := range vals[i:] {
			n += math.Float32bits(t2-x) >> 31
		}
	}
	return int(n)
}

// gatherGroup appends the tokens of x (first index first) with
// -Inf < l >= t to s.cands; false if one is NaN or +Inf.
func (s *Sampler) gatherGroup(x []float32, first int, t float32) bool {
	for j, l := range x {
		if l < t {
			continue
		}
		if !(l <= math.MaxFloat32) {
			return false
		}
		if l > float32(math.Inf(-1)) {
			s.cands = append(s.cands, cand{idx: int32(first + j), l: l})
		}
	}
	return true
}

// candsTop returns the largest l of c (non-empty, index order) and the
// lowest index holding it.
func candsTop(c []cand) (float32, int32) {
	M, t0 := c[0].l, c[0].idx
	for _, x := range c[1:] {
		if x.l > M {
			M, t0 = x.l, x.idx
		}
	}
	return M, t0
}

// argmaxCands returns the argmax of float32(float32(l·invT) + g) over the
// tokens of s.cands with l >= floor, lowest index on ties (s.cands is in
// index order). ok is false for a NaN noise value or no finite score, which
// the dense path handles.
func (s *Sampler) argmaxCands(r *Row, invT, floor float32) (int32, bool, error) {
	s.idx = s.idx[:0]
	for _, c := range s.cands {
		if c.l >= floor {
			s.idx = append(s.idx, c.idx)
		}
	}
	s.fillNoise(r)
	best, tau := int32(-1), float32(math.Inf(-1))
	j := 0
	for _, c := range s.cands {
		if c.l < floor {
			continue
		}
		g := s.noise[j]
		j++
		if g != g {
			return 0, false, nil
		}
		if sc := float32(float32(c.l*invT) + g); sc > tau {
			best, tau = c.idx, sc
		}
	}
	return best, best >= 0, nil
}

// fillNoise sets s.noise[j] to the noise of token s.idx[j].
func (s *Sampler) fillNoise(r *Row) {
	if cap(s.noise) < len(s.idx) {
		s.noise = make([]float32, len(s.idx), 2*len(s.idx))
	}
	s.noise = s.noise[:len(s.idx)]
	if r.Noise != nil && !r.NoiseBound {
		for i, t := range s.idx {
			s.noise[i] = r.Noise[t]
		}
	} else {
		noisepool.FillIndices(r.NoiseKey, r.NoiseRow, s.idx, s.noise)
	}
}

// sparseNucleus returns the top-p floor that nucleusFloor would compute,
// from the gathered tokens (every finite l >= t) and a bound on the weight
// of the others, or ok false.
//
// The mass buckets below known = min(bh+1, bucket of M-t) hold only
// gathered tokens (l < t gives float32(M-l) >= float32(M-t)), so their
// sums are nucleusFloor's, in the same order. The weight K of the gathered
// tokens is exact; each of the u others weighs at most w(t), where
// w(v) = e^x·(1+1e-5), x the weight argument of v (fastExp is within 2e-7
// of e^x, and float32 rounding keeps the arguments' order). If that bound
// is too loose to decide, countAbove finds the band of them above
// t2 = t - bandNats·T; the rest weigh at most w(t2). The row's total as
// weightSum rounds it lies in [K, K + bound] widened by the rounding of
// the sums. Head tokens never have weights that nucleusFloor's block skip
// drops (G < 40, so their arguments exceed -86).
func (s *Sampler) sparseNucleus(base []float32, nb int, t, M, invT, topP float32) (float32, bool) {
	vocab := len(base)
	smax := float32(M * invT)
	_, bh := nucleusHead(vocab, invT, topP)
	known := min(bh+1, math.Float32bits(float32(M-t))>>massShift)
	K := s.headWeights(M, invT, known)
	w := func(v float32) float64 { return math.Exp(float64(float32(float32(v*invT)-smax))) * (1 + 1e-5) }
	u := vocab - len(s.cands)
	rel := float64(vocab+16) * 0x1p-52 // twice the float64 rounding of any of the sums
	l, ok := s.nucleusBetween(K*(1-rel), (K+float64(u)*w(t))*(1+rel), M, topP, known)
	if ok || u == 0 || !(t > float32(math.Inf(-1))) {
		return l, ok
	}
	t2 := t - float32(bandNats/float64(invT))
	band := s.countAbove(base, nb, t2) - len(s.cands)
	tail := float64(band)*w(t) + float64(u-band)*w(t2)
	return s.nucleusBetween(K*(1-rel), (K+tail)*(1+rel), M, topP, known)
}

// headWeights sets the weight of every gathered token, fills s.mass with
// those of the buckets below known and collects their tokens into s.head,
// and returns the total weight of the gathered tokens.
func (s *Sampler) headWeights(M, invT float32, known uint32) float64 {
	smax := float32(M * invT)
	clear(s.mass[:min(known, massBuckets)])
	s.head = s.head[:0]
	var K float64
	for i := range s.cands {
		c := &s.cands[i]
		c.w = fastExp(float32(float32(c.l*invT) - smax))
		K += float64(c.w)
		if B := math.Float32bits(float32(M-c.l)) >> massShift; B < known {
			s.mass[B] += float64(c.w)
			s.head = append(s.head, *c)
		}
	}
	return K
}

// nucleusBetween returns the floor nucleusCut gives for every total weight
// in [lo, hi], or ok false if it is not one floor: nucleusCut's answer is
// monotone in the target, so the two ends decide.
func (s *Sampler) nucleusBetween(lo, hi float64, M, topP float32, known uint32) (float32, bool) {
	fl, okLo := s.nucleusCut(s.head, float64(topP)*lo, M, known)
	fh, okHi := s.nucleusCut(s.head, float64(topP)*hi, M, known)
	return fl, okLo && okHi && fl == fh
}

// plainPool returns the argmax over every token of
// float32(float32(l·invT) + g), lowest index on ties, in one pass over the
// logits and the pool's noise row g = r.Noise. ok is false for a NaN or
// +Inf logit, a scaled logit that overflows, a NaN noise value or a row
// with no finite score: the dense path handles those.
//
// With a bound row (r.NoiseBound) the pass compares the bounds: a group
// whose bounded scores all stay at or below tau cannot hold a new best
// (rounding is monotone, so an exact score is at most its bound's), and
// only a group that passes computes its exact noise.
func (s *Sampler) plainPool(r *Row, base []float32, nb int, invT float32) (int32, bool) {
	a := poolArgmax{best: -1, tau: float32(math.Inf(-1)), invT: invT, bound: r.NoiseBound}
	if a.bound {
		a.seed = noisepool.RowSeed(r.NoiseKey, r.NoiseRow)
	}
	g := r.Noise
	for b := range nb {
		vals := s.blockVals(base, b)
		lo := b << blockShift
		if !a.scan(vals, g[lo:lo+len(vals)], lo) {
			return 0, false
		}
	}
	return a.best, a.best >= 0
}

// poolArgmax is plainPool's running best: token best with score tau.
type poolArgmax struct {
	best      int32
	tau, invT float32
	bound     bool   // the noise row holds bounds: offer computes exact noise
	seed      uint64 // the row's seed, for the exact noise of a bound row
	exact     [8]float32
}

// scan offers the tokens of l (noise g, first index lo). A group of 8 is
// looked at token by token only if one of its scores is above tau or NaN.
func (a *poolArgmax) scan(l, g []float32, lo int) bool {
	invT, tau := a.invT, a.tau
	g = g[:len(l)]
	i := 0
	for ; i+8 <= len(l); i += 8 {
		x, z := l[i:i+8:i+8], g[i:i+8:i+8]
		s0, s1 := float32(float32(x[0]*invT)+z[0]), float32(float32(x[1]*invT)+z[1])
		s2, s3 := float32(float32(x[2]*invT)+z[2]), float32(float32(x[3]*invT)+z[3])
		s4, s5 := float32(float32(x[4]*invT)+z[4]), float32(float32(x[5]*invT)+z[5])
		s6, s7 := float32(float32(x[6]*invT)+z[6]), float32(float32(x[7]*invT)+z[7])
		if !(s0 <= tau) || !(s1 <= tau) || !(s2 <= tau) || !(s3 <= tau) ||
			!(s4 <= tau) || !(s5 <= tau) || !(s6 <= tau) || !(s7 <= tau) {
			if !a.offer(x, a.noise(z, lo+i), lo+i) {
				return false
			}
			tau = a.tau
		}
	}
	return a.offer(l[i:], a.noise(g[i:], lo+i), lo+i)
}

// noise returns the exact noise of the (at most 8) tokens from index first
// whose pool values are z: z itself, or for a bound row the values
// computed from the generator's bits.
func (a *poolArgmax) noise(z []float32, first int) []float32 {
	if !a.bound {
		return z
	}
	for j := range z {
		a.exact[j] = noisepool.GumbelFromBits(noisepool.Bits(a.seed, first+j))
	}
	return a.exact[:len(z)]
}

// offer offers tokens x (noise z, first index first) in index order, so a
// later token with an equal score does not replace the best.
func (a *poolArgmax) offer(x, z []float32, first int) bool {
	z = z[:len(x)]
	for j, l := range x {
		sl := float32(l * a.invT)
		if !(l <= math.MaxFloat32) || sl > math.MaxFloat32 || z[j] != z[j] {
			return false
		}
		if sc := float32(sl + z[j]); sc > a.tau {
			a.best, a.tau = int32(first+j), sc
		}
	}
	return true
}
