//go:build (s390x || ppc64le) && !purego

package blockmax

// settle finishes the raw block maxima a vector kernel wrote into out:
// a block holding a NaN (raw NaN) is redone by ofNaN, its maximum over the
// rest and the flag; a zero raw maximum is replaced by zero(block), since
// the instruction leaves the definition's answer open there (the sign of
// a zero, or a denormal read as a zero). It reports whether v holds a NaN.
func settle(v, out []float32, zero func(block []float32) float32) bool {
	nan := false
	for b, m := range out {
		block := v[b<<Shift : (b+1)<<Shift]
		switch {
		case m != m:
			out[b], _ = ofNaN(block)
			nan = true
		case m == 0:
			out[b] = zero(block)
		}
	}
	return nan
}
