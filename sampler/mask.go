package sampler

import "math"

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
			for i := lo; i < hi; i++ {
				if bits&(1<<(i-lo)) != 0 {
					dst[i] = src[i]
				} else {
					dst[i] = inf
				}
			}
		}
	}
}
