package noisepool

import "math"

// The generator has three stages, each a pure function:
//
//	RowSeed(key, row)  -> 64-bit row seed            (two SplitMix64 finalisers)
//	Bits(seed, index)  -> 32 random bits             (one SplitMix64 finaliser per index pair)
//	GumbelFromBits(b)  -> float32 standard Gumbel    (two branchless float32 logs)
//
// Gumbel(key, row, i) == GumbelFromBits(Bits(RowSeed(key, row), i)) for every
// input, and FillRow, FillIndices and the pool produce exactly those bits on
// every architecture: the arithmetic is IEEE float32 with every product
// rounded before it is added (explicit float32 conversions forbid the
// compiler from fusing multiply-adds on arm64, ppc64le, s390x or GOAMD64=v3),
// and bits are taken from integers with shifts, never from memory layout.
// On amd64 CPUs with AVX-512, FillRow uses an assembly kernel (fill_amd64.s)
// doing the same operations; it equals the portable kernel on all 2^32
// inputs (TestMonotoneExhaustive) and on hashed rows (TestFillRowMatchesScalar).

const golden = 0x9e3779b97f4a7c15 // SplitMix64 increment: 2^64 / golden ratio

// mix64 is the SplitMix64 finaliser (Stafford's Mix13): a bijection of
// uint64 whose output passes BigCrush when fed a Weyl sequence.
func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// RowSeed is the per-row state of the generator. Together with Bits and
// GumbelFromBits it exposes the generator's stages, so that a sampler can
// test a token's raw bits against a bound before paying for the logs:
//
//	Gumbel(key, row, i) == GumbelFromBits(Bits(RowSeed(key, row), i))
//
// A row reads the counters seed, seed+golden, … (one per index pair). Seeds
// are hashes, so two rows share values (shifted) only if their seeds fall
// within vocab/2 steps of each other: probability about vocab/2^64 per pair
// of rows.
func RowSeed(key, row uint64) uint64 { return mix64(mix64(key) + row*golden) }

// Bits returns the 32 random bits of token index (index >= 0) of the row
// whose seed is seed. One 64-bit hash serves two neighbouring indices: index
// 2p takes the low half and 2p+1 the high half of mix64(seed + p*golden).
func Bits(seed uint64, index int) uint32 {
	h := mix64(seed + uint64(index>>1)*golden)
	return uint32(h >> (32 * uint(index&1)))
}

// Gumbel returns the standard Gumbel noise value for (key, row, index).
// It is a pure function: any caller, on any core, in any order, gets the
// same bits.
func Gumbel(key, row uint64, index int) float32 {
	return GumbelFromBits(Bits(RowSeed(key, row), index))
}

// FillRow sets dst[i] = Gumbel(key, row, i) for every i.
func FillRow(key, row uint64, dst []float32) { fillRow(RowSeed(key, row), 0, dst) }

// FillIndices sets dst[j] = Gumbel(key, row, int(idx[j])). It panics if dst
// is shorter than idx.
func FillIndices(key, row uint64, idx []int32, dst []float32) {
	seed := RowSeed(key, row)
	dst = dst[:len(idx)]
	for j, i := range idx {
		dst[j] = GumbelFromBits(Bits(seed, int(i)))
	}
}

// Range of the generator. Bits 0 gives MinGumbel and bits 0xffffffff gives
// MaxGumbel (TestExtremes pins them). With the uniform U = (b+0.5)/2^32 they
// are -log(-log 2^-33) = -log(22.87) and -log(2^-33) = 33·ln 2.
//
// MaxGumbel is reached because the upper half of the bits is mapped through
// the complementary uniform v = 1-U, which float32 represents exactly down to
// 2^-33, so E = -log1p(-v) keeps its small values. Forming U in float32 first
// would round every U > 1-2^-25 to 1 and cap the tail at about 16.6: tokens
// that need G > 16.6 to win (logit gap/T above 16.6) would become unreachable.
//
// Why 32 bits are enough: U is quantised to 2^32 equally likely values, so
// for every threshold x, P(G > x) differs from the Gumbel tail
// 1-exp(-exp(-x)) by less than 2^-32 ≈ 2.3e-10 (float rounding of G moves x
// by a few ulps; TestUpperTail checks this at x = 10, 15, 20). Values above
// MaxGumbel (probability 2^-33 per value, about once per 86,000 rows of
// 100352 tokens) are folded into the top input, and the quantisation step in
// G grows like 2^-32·e^G (8e-4 at G = 15, 0.1 at G = 20): an event that needs
// G > 20 (probability 2.1e-9) keeps its probability to within 2.3e-10.
const (
	MinGumbel float32 = -3.1299946 // GumbelFromBits(0)
	MaxGumbel float32 = 22.873857  // GumbelFromBits(0xffffffff)
)

// GumbelFromBits maps 32 random bits b to a standard Gumbel value
// G = -log(E), E = -log(U), U = (b+0.5)/2^32, so U lies strictly inside (0,1)
// and G is always finite, within [MinGumbel, MaxGumbel].
//
// GumbelFromBits is non-decreasing in b (checked for all 2^32 inputs by
// TestMonotoneExhaustive with TPC_NOISE_EXHAUSTIVE=1, and around every
// branch and range-reduction boundary by TestMonotone in every run), so
// "b < MinBitsAbove(t)" exactly decides "GumbelFromBits(b) <= t". Its error
// against the float64 formula is below 1e-6 absolute and 2.5 float32 ulps
// where |G| > 0.5 (measured by TestAccuracy on 1.1 million inputs including
// both tails; see docs/benchmarks-noise.md).
func GumbelFromBits(b uint32) float32 {
	// Fold the upper half onto the lower: c < 2^31 and q = (2c+1)/2^33 in
	// (0, 1/2]. For b < 2^31, q = U; otherwise q = v = 1-U, computed without
	// cancellation.
	upper := uint32(int32(b) >> 31) // all ones when b >= 2^31
	c := b ^ upper
	q := float32(2*c+1) * 0x1p-33
	qb := math.Float32bits(q)

	// Lower half: log U = k ln2 + log1p(f), U = 2^k·m, m in [sqrt(1/2), sqrt 2).
	k1, f1 := reduce(qb)

	// Upper half: log(1-v) = k ln2 + log1p(f) with k = 0, f = -v for
	// v <= 1-sqrt(1/2), else k = -1, f = 1-2v (exact by Sterbenz's lemma).
	big := uint32(int32(oneMinusSqrtHalfBits-qb) >> 31) // all ones when v > 1-sqrt(1/2)
	f2 := sel(qb|0x80000000, math.Float32bits(1-float32(2*q)), big)
	k2 := int32(big)

	f := math.Float32frombits(sel(math.Float32bits(f1), f2, upper))
	k := int32(sel(uint32(k1), uint32(k2), upper))
	e := -logReduced(k, f) // E = -log U, in [2^-33, 22.9]

	k, f = reduce(math.Float32bits(e))
	return -logReduced(k, f)
}

// MinBitsAbove returns the smallest b with GumbelFromBits(b) > t, and false
// when no 32-bit input exceeds t (t >= MaxGumbel or t is NaN). Because
// GumbelFromBits is non-decreasing, every b below the result has
// GumbelFromBits(b) <= t and every b at or above it has GumbelFromBits(b) > t:
// the bound is exact, float rounding included, since it is found by
// evaluating GumbelFromBits itself (32 evaluations).
func MinBitsAbove(t float32) (uint32, bool) {
	if !(GumbelFromBits(math.MaxUint32) > t) {
		return 0, false
	}
	lo, hi := uint64(0), uint64(math.MaxUint32) // answer in [lo, hi]
	for lo < hi {
		mid := (lo + hi) / 2
		if GumbelFromBits(uint32(mid)) > t {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return uint32(lo), true
}

const oneMinusSqrtHalfBits = 0x3e95f61a // float32 bits of 0.29289323 (1 - sqrt(1/2), rounded up)

// sel returns b where mask is all ones and a where it is zero.
func sel(a, b, mask uint32) uint32 { return a ^ ((a ^ b) & mask) }

// reduce splits a positive normal float32 x (given as bits) into
// x = 2^k · (1+f) with 1+f in [sqrt(1/2), sqrt 2); f is exact.
func reduce(xb uint32) (int32, float32) {
	xb += 0x3f800000 - 0x3f3504f3
	k := int32(xb>>23) - 0x7f
	m := math.Float32frombits(xb&0x007fffff + 0x3f3504f3)
	return k, m - 1
}

// logReduced returns k·ln2 + log1p(f) for f in [sqrt(1/2)-1, sqrt(2)-1],
// using Cephes' logf polynomial (relative error about 1e-7 for the
// polynomial). Every product is rounded before the following add.
func logReduced(k int32, f float32) float32 {
	z := float32(f * f)
	y := float32(logP0)
	y = float32(y*f) + logP1
	y = float32(y*f) + logP2
	y = float32(y*f) + logP3
	y = float32(y*f) + logP4
	y = float32(y*f) + logP5
	y = float32(y*f) + logP6
	y = float32(y*f) + logP7
	y = float32(y*f) + logP8
	y = float32(float32(y*f) * z)
	kf := float32(k)
	y += float32(kf * ln2Lo)
	y -= float32(0.5 * z)
	r := f + y
	return r + float32(kf*ln2Hi) // exact product: |k| <= 34, ln2Hi = 355/512
}

// Cephes logf coefficients and ln 2 split as ln2Hi + ln2Lo, shared by
// every kernel (as float32 values). Subtracting c equals adding -c in IEEE
// arithmetic, so the signs are folded into the constants.
const (
	logP0 float32 = 7.0376836292e-2
	logP1 float32 = -1.1514610310e-1
	logP2 float32 = 1.1676998740e-1
	logP3 float32 = -1.2420140846e-1
	logP4 float32 = 1.4249322787e-1
	logP5 float32 = -1.6668057665e-1
	logP6 float32 = 2.0000714765e-1
	logP7 float32 = -2.4999993993e-1
	logP8 float32 = 3.3333331174e-1
	ln2Lo float32 = -2.12194440e-4
	ln2Hi float32 = 0.693359375
)
