package sampler

import (
	"math"
	"math/bits"

	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/internal/blockmax"
)

// maskRow returns the row's logits with every token outside r.Allow set to
// −Inf. A half-precision row was converted into the scratch buffer already
// and is masked in place; a float32 row, which the caller owns, is copied
// first.
func (s *Sampler) maskRow(r *Row, base []float32) []float32 {
	out := base
	if r.Dtype == Float32 {
		if cap(s.masked) < len(base) {
			s.masked = make([]float32, len(base))
		}
		out = s.masked[:len(base)]
	}
	applyMask(out, base, r.Allow)
	return out
}

// applyMask writes src to dst (they may be the same slice) with every
// token whose bit in allow is clear, or which is past allow's end, set to
// −Inf. Whole words of allowed or refused tokens are copied or filled
// without looking at their bits.
func applyMask(dst, src []float32, allow []uint64) {
	inf := float32(math.Inf(-1))
	const negInf = 0xFF800000 // −Inf's bits
	for w := 0; w*64 < len(src); w++ {
		lo, hi := w*64, min(w*64+64, len(src))
		var bits uint64
		if w < len(allow) {
			bits = allow[w]
		}
		switch bits {
		case math.MaxUint64:
			copy(dst[lo:hi], src[lo:hi])
		case 0:
			for i := lo; i < hi; i++ {
				dst[i] = inf
			}
		default:
			// Branchless: a mixed word's bits follow no pattern a branch
			// predictor could learn (inside a JSON string most words mix).
			d, sw := dst[lo:hi], src[lo:hi]
			for j := range d {
				keep := -uint32(bits >> uint(j) & 1) // all ones to keep
				d[j] = math.Float32frombits(math.Float32bits(sw[j])&keep | negInf&^keep)
			}
		}
	}
}

// lazyMask reports whether a masked row with parameters p is sampled with
// its mask applied block by block, as the sampler reads them (plain
// temperature and greedy rows, which read few blocks), rather than to the
// whole row first (top-k, top-p and min-p read every token's weight).
func lazyMask(p *api.Params) bool {
	return len(p.AllowedTokenIDs) == 0 && p.TopK == 0 && !(p.TopP > 0 && p.TopP < 1) && p.MinP == 0
}

func allowed(allow []uint64, t int32) bool {
	w := int(t) / 64
	return w < len(allow) && allow[w]>>(uint(t)%64)&1 != 0
}

// maskBlock sets the refused tokens of one block (first token lo) to −Inf.
func maskBlock(buf []float32, allow []uint64, lo int) {
	applyMask(buf, buf, allowWords(allow, lo, len(buf)))
}

// allowWords is the mask of the n tokens from lo (a multiple of 64), as
// words of its own: the block's share of allow, zero past its end.
func allowWords(allow []uint64, lo, n int) []uint64 {
	w0, w1 := lo/64, (lo+n+63)/64
	if w1 <= len(allow) {
		return allow[w0:w1]
	}
	if w0 >= len(allow) {
		return nil
	}
	return allow[w0:]
}

// exactTopRounds bounds exactTop's rounds before it masks every block.
const exactTopRounds = 8

// exactTop makes the blockMax of the blocks that may hold the row's largest
// allowed logit exact: while the largest bound is a block's unmasked
// maximum, that block's maximum over its allowed tokens replaces it. Then
// the largest blockMax is the largest allowed logit, and every other is a
// bound (an upper one), which is all the argmax's pruning needs.
func (s *Sampler) exactTop(base []float32, nb int) {
	if cap(s.exact) < nb {
		s.exact = make([]bool, nb)
	}
	exact := s.exact[:nb]
	for b := range nb {
		exact[b] = s.ovStart[b] != s.ovStart[b+1] // blockBounds made those exact
	}
	if sparseAllow(s.allow, len(base)) {
		s.exactSparse(base, nb)
		return
	}
	for round := 0; ; round++ {
		if round == exactTopRounds {
			// The grammar refuses what the model prefers: each round
			// rescans every bound, so bound the rounds and take every
			// block's allowed maximum (a masked pass over the row).
			s.exactAll(base, nb)
			return
		}
		M := float32(math.Inf(-1))
		for _, m := range s.blockMax[:nb] {
			if m > M { // not the builtin max: a call on POWER8 (see blockmax.Of)
				M = m
			}
		}
		cand := -1
		for b, m := range s.blockMax[:nb] {
			if m != M {
				continue
			}
			if exact[b] {
				return // an allowed token has M, and no block can exceed it
			}
			if cand < 0 {
				cand = b
			}
		}
		if cand < 0 || M == float32(math.Inf(-1)) {
			return
		}
		s.blockMax[cand], _ = blockmax.Of(s.blockVals(base, cand))
		exact[cand] = true
	}
}

// sparseAllow reports whether a mask allows under a quarter of the row's
// tokens: the unmasked block maxima are then poor bounds (the largest
// logits are mostly refused), and visiting the allowed tokens alone is
// cheap.
func sparseAllow(allow []uint64, vocab int) bool {
	n := 0
	for _, w := range allow {
		n += bits.OnesCount64(w)
	}
	return n < vocab/4
}

// exactSparse sets every block's blockMax to its maximum over its allowed
// tokens, visiting only those (blocks with overrides are exact already).
func (s *Sampler) exactSparse(base []float32, nb int) {
	for b := range nb {
		if s.exact[b] {
			continue
		}
		lo, hi := b<<blockShift, min((b+1)<<blockShift, len(base))
		m := float32(math.Inf(-1))
		for w := lo / 64; w < (hi+63)/64 && w < len(s.allow); w++ {
			for word := s.allow[w]; word != 0; word &= word - 1 {
				if i := w*64 + bits.TrailingZeros64(word); i < hi {
					if v := base[i]; v > m {
						m = v
					}
				}
			}
		}
		if m == 0 {
			m = 0 // +0, as blockmax.Of gives a zero maximum
		}
		s.blockMax[b] = m
		s.exact[b] = true
	}
}

// exactAll sets every block's blockMax to its maximum over its allowed
// tokens.
func (s *Sampler) exactAll(base []float32, nb int) {
	for b := range nb {
		if !s.exact[b] {
			s.blockMax[b], _ = blockmax.Of(s.blockVals(base, b))
			s.exact[b] = true
		}
	}
}
