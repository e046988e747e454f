package sampler

import (
	"math"

	"github.com/tpcoord/tpcoord/noisepool"
)

// argmaxState is lazyArgmax's running best: token best with score tau,
// lowest index among equal scores so far. cut is the smallest logit that
// can still matter: a token with l < cut is below the floor, or has
// float32(float32(l·invT) + gMax) < tau, so no noise value lifts it to tau.
type argmaxState struct {
	tau, cut       float32
	best           int32
	invT, floor, M float32
	gMax           float32
	seed           uint64 // the noise row's seed (noisepool.RowSeed)
	bound          bool   // pool rows hold bounds (Row.NoiseBound)
}

// offer records token i with score sc if it beats the running best (higher
// score, or the same score at a lower index), raising cut with tau.
func (a *argmaxState) offer(i int32, sc float32) {
	switch {
	case sc > a.tau:
		a.tau, a.best = sc, i
		a.cut = max(logitCut(a.M, a.invT, a.gMax, sc), a.floor)
	case sc == a.tau && i < a.best:
		a.best = i
	}
}

// logitCut returns the smallest float32 l <= M with
// float32(float32(l·invT) + gMax) >= tau, or −Inf if every finite l has it.
// The predicate is the sampler's own rounded arithmetic, which is
// non-decreasing in l for invT > 0, so a binary search over the ordered
// float32 values finds the exact boundary: no margin is needed. The caller
// guarantees that M satisfies it (tau is the score of a token with l <= M).
func logitCut(M, invT, gMax, tau float32) float32 {
	return smallestWith(M, func(l float32) bool { return float32(float32(l*invT)+gMax) >= tau })
}

// smallestWith returns the smallest float32 l <= M for which ok holds, by
// bisection over the ordered keys of the float32 values: ok must hold at M
// and be monotone in l. -Inf when ok holds at -MaxFloat32.
func smallestWith(M float32, ok func(float32) bool) float32 {
	lo, hi := orderedKey(-math.MaxFloat32), orderedKey(M)
	if ok(fromOrderedKey(lo)) {
		return float32(math.Inf(-1))
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if ok(fromOrderedKey(mid)) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return fromOrderedKey(hi)
}

// keyThreshold returns the smallest noise key that can lift a token whose
// scaled logit is at most sb to tau: for key < thr, float32(sb + g) < tau.
// It needs no rounding margin: it compares the same rounded sums the sampler
// computes, and float32 addition is monotone in each operand.
func (s *Sampler) keyThreshold(sb, tau float32) uint32 {
	// Largest j with float32(sb + tab[j]) < tau; tab is non-decreasing.
	lo, hi := -1, tabSize // fails(lo) holds by convention; fails(tabSize) does not (block not skipped)
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if float32(sb+s.tab[mid]) < tau {
			lo = mid
		} else {
			hi = mid
		}
	}
	if lo < 0 {
		return 0
	}
	return uint32(lo)<<tabShift + 1
}

// lazyArgmax returns argmax over tokens with l >= floor of float32(s + g).
//
// It starts from t0 (the first maximum of l), whose score tau bounds the
// winner from below. Noise is at most gMax = GumbelFromBits of the
// generator's top input, so only tokens with l >= cut (see argmaxState) can
// reach tau; blocks whose maximum is below cut are skipped whole, and in the
// others every token below cut is skipped after one compare, before its
// noise is read or computed (noise bound pruning). With inline noise, a
// token at or above cut computes only its 32 random bits (one hash per
// index pair) and compares them with the block's key threshold, then with
// the noise table's bound for its own logit; only tokens that pass both pay
// for the logs (lazy noise). With pool noise, a block whose largest logit
// plus its largest noise (Row.NoiseBlockMax) stays below tau is skipped
// without reading its noise, and with a vector kernel a block is first
// reduced to its best kept score (scoreMax). Every skip is exact, so the
// result equals the full-row argmax.
func (s *Sampler) lazyArgmax(r *Row, base []float32, nb int, M float32, t0 int32, invT, floor float32) int32 {
	seed := noisepool.RowSeed(r.NoiseKey, r.NoiseRow)
	var g0 float32
	if r.Noise != nil && !r.NoiseBound {
		g0 = r.Noise[t0]
	} else {
		g0 = noisepool.GumbelFromBits(noisepool.Bits(seed, int(t0)))
	}
	a := argmaxState{best: t0, invT: invT, floor: floor, M: M, gMax: s.gMax, seed: seed, bound: r.NoiseBound}
	a.tau = float32(float32(M*invT) + g0)
	a.cut = max(logitCut(M, invT, s.gMax, a.tau), floor)
	if r.NoiseBlockMax != nil {
		return s.argmaxBlockBounded(&a, r, base, nb)
	}
	for b := range nb {
		bm := s.blockMax[b]
		if bm < a.cut {
			continue
		}
		vals := s.blockVals(base, b)
		lo := b << blockShift
		if r.Noise != nil {
			s.scanPool(&a, vals, r.Noise[lo:lo+len(vals)], lo)
		} else {
			s.scanInline(&a, vals, seed, lo, float32(bm*invT))
		}
	}
	return a.best
}

// argmaxBlockBounded is lazyArgmax's loop for a pool row with block
// maxima: it lists the blocks whose largest logit plus largest noise
// reaches tau (a few in an LLM's row), starts loading their noise all at
// once, so that the cache misses overlap instead of queueing block after
// block, and then scans them, skipping those that tau has since passed.
func (s *Sampler) argmaxBlockBounded(a *argmaxState, r *Row, base []float32, nb int) int32 {
	nbm := r.NoiseBlockMax[:nb]
	s.blocks = s.blocks[:0]
	for b, bm := range s.blockMax[:nb] {
		if a.blockReaches(bm, nbm[b]) {
			s.blocks = append(s.blocks, int32(b))
		}
	}
	s.sink += touchBlocks(r.Noise, s.blocks)
	for _, b := range s.blocks {
		if !a.blockReaches(s.blockMax[b], nbm[b]) {
			continue // tau has risen since the list was made
		}
		vals := s.blockVals(base, int(b))
		lo := int(b) << blockShift
		s.scanPool(a, vals, r.Noise[lo:lo+len(vals)], lo)
	}
	return a.best
}

// blockReaches reports whether a block whose largest logit is bm (never
// NaN) and largest noise nmax may hold a token that reaches tau: every
// score of the block is at most float32(bm·invT) + nmax, since rounding is
// monotone, and a token below cut cannot count.
func (a *argmaxState) blockReaches(bm, nmax float32) bool {
	return bm >= a.cut && float32(float32(bm*a.invT)+nmax) >= a.tau
}

// touchBlocks reads one value per cache line of the given blocks of nz.
// The loads do not depend on each other, so the CPU has all their misses
// in flight at once. The sum is kept only so that the loads stay.
func touchBlocks(nz []float32, blocks []int32) float32 {
	var sum float32
	for _, b := range blocks {
		lo := int(b) << blockShift
		blk := nz[lo:min(lo+blockSize, len(nz))]
		for i := 0; i < len(blk); i += 16 {
			sum += blk[i]
		}
	}
	return sum
}

// scanPool offers every token of a block (first index lo, noise nz) that
// can reach tau. Scores are computed for the whole block: the compare with
// tau is almost never true, so the loop has no unpredictable branch, which
// a per-token compare with cut would add.
func (s *Sampler) scanPool(a *argmaxState, vals, nz []float32, lo int) {
	if active.vector && active.scoreMaxOf(vals, nz, a.invT, a.floor) < a.tau {
		return // no kept token of the block reaches tau
	}
	nz = nz[:len(vals)]
	for j, l := range vals {
		if sc := float32(float32(l*a.invT) + nz[j]); sc >= a.tau && l >= a.cut {
			a.offerPooled(lo+j, l, sc)
		}
	}
}

// offerPooled offers token i (logit l) whose score from the pool row is
// sc >= tau. With a bound row, sc is a bound: the exact score is computed
// from the generator and offered if it still reaches tau.
func (a *argmaxState) offerPooled(i int, l, sc float32) {
	if a.bound {
		sc = float32(float32(l*a.invT) + noisepool.GumbelFromBits(noisepool.Bits(a.seed, i)))
		if sc < a.tau {
			return
		}
	}
	a.offer(int32(i), sc)
}

// scanInline offers every token of a block (first index lo, block maximum
// scaled sb) that can reach tau, computing noise only for those whose bits
// pass the bounds. It first gathers the offsets of the tokens at or above
// cut without a branch (the compare is true for a data-dependent fraction of
// tokens, which a branch would mispredict), then hashes only those, each
// on its own: sharing one hash between the two tokens of a pair needs a
// branch on whether the next gathered token is the neighbour, which
// mispredicts about as often as it saves a hash.
func (s *Sampler) scanInline(a *argmaxState, vals []float32, seed uint64, lo int, sb float32) {
	var offs [blockSize]uint16
	n, cut := 0, a.cut
	for j, l := range vals[:min(len(vals), blockSize)] {
		offs[n&(blockSize-1)] = uint16(j)
		inc := 0
		if l >= cut {
			inc = 1
		}
		n += inc
	}
	thr := s.keyThreshold(sb, a.tau)
	for _, o := range offs[:n] {
		i := lo + int(o)
		bits := noisepool.Bits(seed, i)
		key := bits ^ s.flip
		if key < thr {
			continue
		}
		l := vals[o]
		sl := float32(l * a.invT)
		if l < a.cut || float32(sl+s.tab[key>>tabShift+1]) < a.tau {
			continue // the noise of every key in this table interval is at most tab[j+1]
		}
		if sc := float32(sl + noisepool.GumbelFromBits(bits)); sc >= a.tau {
			a.offer(int32(i), sc)
		}
	}
}
