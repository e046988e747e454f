package sampler

import "math"

// The three passes that touch every token of a row are kernels with a
// pure-Go definition here and, on amd64, vector versions (kernels_amd64.s)
// that must return the same bits for every input (kernels_test.go checks
// it). Each kernel's result is defined so that it does not depend on the
// order in which lanes are combined:
//
//   - blockMaxes: per 256-token block the maximum over non-NaN values, with
//     a zero maximum always +0 (max alone would leave the sign of zero to
//     the lane order), and a flag for any NaN.
//   - scoreMax: the maximum of float32(float32(l·invT) + g) over l >= floor,
//     NaN scores ignored, zero as +0. Only a filter: a block whose scoreMax
//     reaches the running best is rescanned token by token.
//   - expSum: fastExp weights summed in float64 into 16 accumulators,
//     token j into acc[j%16] in index order, so the sums are bit-identical
//     whatever the vector width; plus a bitmap of tokens with
//     float32(M - l) < dh.

// kernels is one implementation of the hot passes. The functions take only
// the whole-vector part of their input (lengths as documented per field);
// the wrappers below finish the remainder in Go.
type kernels struct {
	name string
	// vector: worth running scoreMax as a filter before the scalar
	// argmax loop (the pure-Go scoreMax costs as much as that loop).
	vector bool
	// blockMaxes: len(v) == len(out)·blockSize.
	blockMaxes func(v, out []float32) (nan bool)
	// scoreMax: len(l) == len(g), a multiple of 8.
	scoreMax func(l, g []float32, invT, floor float32) float32
	// expSum: len(l) a multiple of 16, len(mask) == len(l)/16.
	expSum func(l []float32, c *expSumArgs, acc *[16]float64, mask []uint16)
}

// expSumArgs are the per-row constants of the top-p weight pass.
type expSumArgs struct {
	invT, smax, M, dh float32
}

var goKernels = kernels{name: "go", blockMaxes: blockMaxesGo, scoreMax: scoreMaxGo, expSum: expSumGo}

// blockMaxesRow sets out[b] to the maximum of block b of v (see
// blockMaxes) and reports whether v holds a NaN.
func (k *kernels) blockMaxesRow(v, out []float32) bool {
	full := len(v) >> blockShift
	nan := k.blockMaxes(v[:full<<blockShift], out[:full])
	if full<<blockShift < len(v) {
		m, n := blockMaxGo(v[full<<blockShift:])
		out[full] = m
		nan = nan || n
	}
	return nan
}

// scoreMaxOf returns the scoreMax of l and g (equal lengths).
func (k *kernels) scoreMaxOf(l, g []float32, invT, floor float32) float32 {
	n := len(l) &^ 7
	m := k.scoreMax(l[:n], g[:n], invT, floor)
	if n < len(l) {
		m = max32(m, scoreMaxGo(l[n:], g[n:len(l)], invT, floor))
	}
	return m
}

// expSumOf runs expSum over a block (len(l) <= blockSize) whose first token
// has an index that is a multiple of 16; mask needs len(l)/16 rounded up.
func (k *kernels) expSumOf(l []float32, c *expSumArgs, acc *[16]float64, mask []uint16) {
	n := len(l) &^ 15
	k.expSum(l[:n], c, acc, mask[:n/16])
	if n < len(l) {
		var bits uint16
		for j, x := range l[n:] {
			acc[j] += float64(fastExp(float32(float32(x*c.invT) - c.smax)))
			if float32(c.M-x) < c.dh {
				bits |= 1 << j
			}
		}
		mask[n/16] = bits
	}
}

// max32 is max for non-NaN a, b with a zero result +0.
func max32(a, b float32) float32 {
	if b > a {
		a = b
	}
	if a == 0 {
		a = 0
	}
	return a
}

func blockMaxesGo(v, out []float32) bool {
	nan := false
	for b := range out {
		m, n := blockMaxGo(v[b<<blockShift : (b+1)<<blockShift])
		out[b] = m
		nan = nan || n
	}
	return nan
}

// blockMaxGo returns the maximum of the non-NaN values of v (zero as +0,
// −Inf if there are none) and whether v holds a NaN. The two definitions
// below return the same bits for every input (TestBlockMaxVariantsAgree);
// the build picks the one that is fast on the target.
func blockMaxGo(v []float32) (float32, bool) {
	if builtinMaxIsCall {
		return blockMaxCompare(v)
	}
	return blockMaxBuiltin(v)
}

// blockMaxBuiltin uses the builtin max, which has no data-dependent branch
// where it is a machine instruction (amd64, arm64, s390x, ppc64 from
// POWER9): a compare-and-branch running maximum mispredicts on the first
// tokens of every lane, and on rows streamed from memory each mispredict
// also throws away loads in flight. The builtin returns NaN if any input
// is NaN; such a block (a row that is rejected anyway) is redone by
// blockMaxNaN, which skips NaNs.
func blockMaxBuiltin(v []float32) (float32, bool) {
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
		return blockMaxNaN(v)
	}
	if m == 0 {
		m = 0 // +0 whichever zeros the block holds
	}
	return m, false
}

// blockMaxCompare is the running maximum by compare and branch, for
// targets where the builtin max on float32 is a function call (POWER8,
// see builtinMaxIsCall). One compare per token: !(x <= m) is true for a
// new maximum and for NaN, both rare after the first tokens of a lane.
func blockMaxCompare(v []float32) (float32, bool) {
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
	m := max32(max32(max32(m0, m1), max32(m2, m3)), max32(max32(m4, m5), max32(m6, m7)))
	return m, nan
}

// maxStep is blockMaxCompare's update for x with !(x <= m): a new maximum,
// or a NaN, which leaves m and sets the flag.
func maxStep(m, x float32, nan bool) (float32, bool) {
	if x != x {
		return m, true
	}
	return x, nan
}

// blockMaxNaN is blockMaxGo for a block that holds a NaN.
func blockMaxNaN(v []float32) (float32, bool) {
	m := float32(math.Inf(-1))
	for _, x := range v {
		if x == x {
			m = max32(m, x)
		}
	}
	return max32(m, m), true
}

func scoreMaxGo(l, g []float32, invT, floor float32) float32 {
	inf := float32(math.Inf(-1))
	m0, m1, m2, m3 := inf, inf, inf, inf
	g = g[:len(l)]
	for ; len(l) >= 4; l, g = l[4:], g[4:] {
		x, z := l[:4:4], g[:4:4]
		s0 := float32(float32(x[0]*invT) + z[0])
		s1 := float32(float32(x[1]*invT) + z[1])
		s2 := float32(float32(x[2]*invT) + z[2])
		s3 := float32(float32(x[3]*invT) + z[3])
		if s0 > m0 && x[0] >= floor {
			m0 = s0
		}
		if s1 > m1 && x[1] >= floor {
			m1 = s1
		}
		if s2 > m2 && x[2] >= floor {
			m2 = s2
		}
		if s3 > m3 && x[3] >= floor {
			m3 = s3
		}
	}
	for j, x := range l {
		if s := float32(float32(x*invT) + g[j]); s > m0 && x >= floor {
			m0 = s
		}
	}
	return max32(max32(m0, m1), max32(m2, m3))
}

func expSumGo(l []float32, c *expSumArgs, acc *[16]float64, mask []uint16) {
	invT, smax, M, dh := c.invT, c.smax, c.M, c.dh
	for k := range mask {
		x := l[k*16 : k*16+16 : k*16+16]
		var bits uint16
		for j := range 16 {
			acc[j] += float64(fastExp(float32(float32(x[j]*invT) - smax)))
			if float32(M-x[j]) < dh {
				bits |= 1 << j
			}
		}
		mask[k] = bits
	}
}
