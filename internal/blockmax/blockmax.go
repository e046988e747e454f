// Package blockmax computes the largest value of every 256-value block of
// a float32 row. The sampler bounds each block of a row's logits by it
// (and skips the blocks that cannot win); the noise pool bounds each block
// of a noise row by it.
//
// The result does not depend on how a kernel combines its lanes: per block
// the maximum over the values that are not NaN, a zero maximum always +0
// (max alone would leave the sign of a zero to the lane order), −Inf for a
// block of NaNs alone, and a flag for any NaN. Every kernel returns the
// same bits for every input (the tests check it).
package blockmax

import "math"

const (
	// Shift is log2 of Size.
	Shift = 8
	// Size is the number of values in a block.
	Size = 1 << Shift
)

// Count is the number of blocks of a row of n values (the last may be
// short).
func Count(n int) int { return (n + Size - 1) / Size }

// Kernel is one implementation of the pass over whole blocks.
type Kernel struct {
	Name string
	// blocks sets out[b] to the maximum of block b of v; len(v) is
	// len(out)·Size.
	blocks func(v, out []float32) (nan bool)
}

// Go is the portable kernel, the definition the others must match.
var Go = Kernel{Name: "go", blocks: blocksGo}

// Row sets out[b] to the maximum of block b of v, for the Count(len(v))
// blocks (out may be longer), and reports whether v holds a NaN. Whole
// blocks go to k, a short last block to the Go definition.
func (k *Kernel) Row(v, out []float32) bool {
	full := len(v) >> Shift
	nan := k.blocks(v[:full<<Shift], out[:full])
	if full<<Shift < len(v) {
		m, n := Of(v[full<<Shift:])
		out[full] = m
		nan = nan || n
	}
	return nan
}

// Row is Best.Row.
func Row(v, out []float32) bool { return Best.Row(v, out) }

func blocksGo(v, out []float32) bool {
	nan := false
	for b := range out {
		m, n := Of(v[b<<Shift : (b+1)<<Shift])
		out[b] = m
		nan = nan || n
	}
	return nan
}

// Of returns the maximum of v (any length) as a block's, and whether v
// holds a NaN. The two definitions below return the same bits for every
// input; the build picks the one that is fast on the target.
func Of(v []float32) (float32, bool) {
	if builtinMaxIsCall {
		return ofCompare(v)
	}
	return ofBuiltin(v)
}

// ofBuiltin uses the builtin max, which has no data-dependent branch where
// it is a machine instruction (amd64, arm64, s390x, ppc64 from POWER9): a
// compare-and-branch running maximum mispredicts on the first values of
// every lane, and on rows streamed from memory each mispredict also throws
// away loads in flight. The builtin returns NaN if any input is NaN; such
// a block is redone by ofNaN, which skips NaNs.
func ofBuiltin(v []float32) (float32, bool) {
	inf := float32(math.Inf(-1))
	m0, m1, m2, m3, m4, m5, m6, m7 := inf, inf, inf, inf, inf, inf, inf, inf
	w := v
	for ; len(w) >= 8; w = w[8:] {
		x := w[:8:8]
		m0, m1, m2, m3 = max(m0, x[0]), max(m1, x[1]), max(m2, x[2]), max(m3, x[3])
		m4, m5, m6, m7 = max(m4, x[4]), max(m5, x[5]), max(m6, x[6]), max(m7, x[7])
	}
	for _, x := range w {
		m0 = max(m0, x)
	}
	m := max(m0, m1, m2, m3, m4, m5, m6, m7)
	if m != m {
		return ofNaN(v)
	}
	if m == 0 {
		m = 0 // +0 whichever zeros the block holds
	}
	return m, false
}

// ofCompare is the running maximum by compare and branch, for targets
// where the builtin max on float32 is a function call (POWER8, see
// builtinMaxIsCall). One compare per value: !(x <= m) is true for a new
// maximum and for NaN, both rare after the first values of a lane.
func ofCompare(v []float32) (float32, bool) {
	inf := float32(math.Inf(-1))
	m0, m1, m2, m3, m4, m5, m6, m7 := inf, inf, inf, inf, inf, inf, inf, inf
	nan := false
	for ; len(v) >= 8; v = v[8:] {
		x := v[:8:8]
		if !(x[0] <= m0) {
			m0, nan = maxStep(m0, x[0], nan)
		}
		if !(x[1] <= m1) {
			m1, nan = maxStep(m1, x[1], nan)
		}
		if !(x[2] <= m2) {
			m2, nan = maxStep(m2, x[2], nan)
		}
		if !(x[3] <= m3) {
			m3, nan = maxStep(m3, x[3], nan)
		}
		if !(x[4] <= m4) {
			m4, nan = maxStep(m4, x[4], nan)
		}
		if !(x[5] <= m5) {
			m5, nan = maxStep(m5, x[5], nan)
		}
		if !(x[6] <= m6) {
			m6, nan = maxStep(m6, x[6], nan)
		}
		if !(x[7] <= m7) {
			m7, nan = maxStep(m7, x[7], nan)
		}
	}
	for _, x := range v {
		if !(x <= m0) {
			m0, nan = maxStep(m0, x, nan)
		}
	}
	m := Max(Max(Max(m0, m1), Max(m2, m3)), Max(Max(m4, m5), Max(m6, m7)))
	return m, nan
}

// maxStep is ofCompare's update for x with !(x <= m): a new maximum, or a
// NaN, which leaves m and sets the flag.
func maxStep(m, x float32, nan bool) (float32, bool) {
	if x != x {
		return m, true
	}
	return x, nan
}

// ofNaN is Of for a block that holds a NaN.
func ofNaN(v []float32) (float32, bool) {
	m := float32(math.Inf(-1))
	for _, x := range v {
		if x == x {
			m = Max(m, x)
		}
	}
	return Max(m, m), true
}

// Max is max for a and b that are not NaN, with a zero result +0: the
// combining step of every kernel here, and of the sampler's.
func Max(a, b float32) float32 {
	if b > a {
		a = b
	}
	if a == 0 {
		a = 0
	}
	return a
}
