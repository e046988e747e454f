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
	return uint32(PairBits(seed, index>>1) >> (32 * uint(index&1)))
}

// PairBits returns the 64 random bits of the index pair p (p >= 0): the
// low half is Bits(seed, 2p) and the high half Bits(seed, 2p+1), so a
// caller that needs both neighbours hashes once.
func PairBits(seed uint64, p int) uint64 { return mix64(seed + uint64(p)*golden) }

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
// fold, binade and table-interval boundary by TestMonotone in every run), so
// "b < MinBitsAbove(t)" exactly decides "GumbelFromBits(b) <= t". Its error
// against the float64 formula is measured by TestAccuracy (figures in
// docs/benchmarks-noise.md).
//
// Both logs are table-driven base-2 logs: x = 2^k·m with m in [1,2), the top
// five bits of m pick c_j near m, and log2 x = (k + H_j) + log2(1 + r) with
// r = (m - c_j)/c_j. The c_j are chosen so that H_j = log2(c_j) (plus a
// constant for the second log) is a multiple of 2^-18 to within 2e-9, which
// makes k + H_j exact; log2(1 + r) is a degree-3 polynomial whose leading
// term is the rounded product r·(1/(c_j ln 2)) itself. Exact table sums and
// an exact leading term are what keep the result monotone across the 32
// table intervals of every binade.
func GumbelFromBits(b uint32) float32 {
	// Fold the upper half onto the lower: c < 2^31 and q = (2c+1)/2^33 in
	// (0, 1/2]. For b < 2^31, q = U; otherwise q = v = 1-U, computed without
	// cancellation.
	upper := uint32(int32(b) >> 31) // all ones when b >= 2^31
	c := b ^ upper
	q := float32(2*c+1) * 0x1p-33

	// First log: E' = -log2 U. Lower half: U = q = 2^k·m, f = m-2.
	// Upper half: U = 1-v = 2^-1·(2-2v), f = -2v exactly, and the table
	// index comes from 1-v rounded toward zero (so it stays below 1).
	// With t_j = c_j-2, m - c_j = f - t_j in both halves.
	f := math.Float32frombits(math.Float32bits(q)&0x007fffff|0x3f800000) - 2
	x := q
	if upper != 0 {
		f = q * -2
		x = oneMinusRZ(q)
	}
	xb := math.Float32bits(x)
	j := xb >> 18 & 31
	r := float32(float32(f-tabT[j]) * tabI[j])
	e := float32(tabNH[j]-getexp(xb)) - log2p1(r) // E' = E/ln 2, in [1.7e-10, 33]

	// Second log: G = -ln(E' ln 2) = -ln 2·(k + H2_j + log2(1+r)), where
	// H2_j = log2(c_j) + log2(ln 2).
	eb := math.Float32bits(e)
	j = eb >> 18 & 31
	m := math.Float32frombits(eb&0x007fffff | 0x3f800000)
	r = float32(float32(m-tabC2[j]) * tabI2[j])
	l := float32(getexp(eb)+tabH2[j]) + log2p1(r)
	return float32(l * negLn2)
}

// getexp returns the unbiased exponent of a positive normal float32 (given
// as bits) as a float32, as VGETEXPPS does.
func getexp(xb uint32) float32 { return float32(int32(xb>>23) - 127) }

// oneMinusRZ returns 1-q rounded toward zero, for q in (0, 1/2] (as
// VSUBPS with {rz-sae} does): the nearest value y, minus one ulp if it is
// above 1-q (1-y is exact by Sterbenz's lemma).
func oneMinusRZ(q float32) float32 {
	y := 1 - q
	if 1-y < q {
		y = math.Float32frombits(math.Float32bits(y) - 1)
	}
	return y
}

// log2p1 returns log2(1 + r/(1/ln 2)) for |r| <= 0.0226, that is log2(1+s)
// where r = s/ln 2 is the scaled reduced argument: r + r²·(p0 + p1·r), every
// product rounded before the following add.
func log2p1(r float32) float32 {
	z := float32(r * r)
	y := float32(float32(logP1*r)+logP0) * z
	return r + float32(y)
}

// Polynomial coefficients (minimax fit, by Lawson iteration, of (log2(1+r ln 2) - r)/r² on
// |r| <= 0.0226) and -ln 2, shared by every kernel as float32 values.
const (
	logP0  float32 = -0.3466086
	logP1  float32 = 0.16017424
	negLn2 float32 = -0.6931472
)

// Tables of the two logs, indexed by the top five mantissa bits j of the
// argument (float32 bit patterns; written by a search program, see
// docs/benchmarks-noise.md). First log: tabT = c_j-2, tabI = 1/(c_j ln 2),
// tabNH = -log2(c_j) (a multiple of 2^-18); c_31 = 2 exactly, so that for
// tiny v the first log is exactly -log2p1(-v/ln 2). Second log: tabC2 = c_j,
// tabI2 = 1/(c_j ln 2), tabH2 = log2(c_j) + log2(ln 2) (a multiple of 2^-18).
var (
	tabT, tabI, tabNH, tabC2, tabI2, tabH2 = f32s(tabTBits), f32s(tabIBits), f32s(tabNHBits), f32s(tabC2Bits), f32s(tabI2Bits), f32s(tabH2Bits)
)

func f32s(b [32]uint32) (t [32]float32) {
	for i, v := range b {
		t[i] = math.Float32frombits(v)
	}
	return t
}

var (
	tabTBits = [32]uint32{
		0xbf7bf2ba, 0xbf73fee4, 0xbf6c0c56, 0xbf64072c, 0xbf5beee0, 0xbf540d7e, 0xbf4c0f52, 0xbf43e99a,
		0xbf3bf484, 0xbf33f716, 0xbf2c1e76, 0xbf23e742, 0xbf1bef88, 0xbf14067c, 0xbf0c1638, 0xbf040efa,
		0xbef7fb90, 0xbee82b74, 0xbed7d110, 0xbec7fdc4, 0xbeb80260, 0xbea80a80, 0xbe97fc68, 0xbe881d10,
		0xbe6fd528, 0xbe500f20, 0xbe304448, 0xbe1038d8, 0xbde035b0, 0xbd9fb420, 0xbd4111c0, 0x00000000,
	}

	tabIBits = [32]uint32{
		0x3fb5c9a8, 0x3fb064bf, 0x3fab5038, 0x3fa67998, 0x3fa1dc69, 0x3f9d9bc4, 0x3f998481, 0x3f958f83,
		0x3f91e34f, 0x3f8e6099, 0x3f8b172d, 0x3f87ceca, 0x3f84c4d0, 0x3f81e220, 0x3f7e38cb, 0x3f78d99d,
		0x3f73ad19, 0x3f6ecf57, 0x3f69fa4e, 0x3f657bf0, 0x3f611e2d, 0x3f5ceb10, 0x3f58d9cd, 0x3f54f966,
		0x3f51289d, 0x3f4d8bf7, 0x3f4a0e30, 0x3f46a786, 0x3f435bd0, 0x3f40283e, 0x3f3d1f49, 0x3f38aa3b,
	}

	tabNHBits = [32]uint32{
		0xbcb99800, 0xbd876600, 0xbdddbe00, 0xbe193200, 0xbe42b800, 0xbe6a0d00, 0xbe887380, 0xbe9bbd80,
		0xbeae1b00, 0xbec01900, 0xbed15980, 0xbee2fe00, 0xbef3b580, 0xbf01f840, 0xbf09f040, 0xbf11d380,
		0xbf199600, 0xbf210940, 0xbf289600, 0xbf2fbf80, 0xbf36d7c0, 0xbf3dcc40, 0xbf44a940, 0xbf4b52c0,
		0xbf520000, 0xbf586f00, 0xbf5ec2c0, 0xbf6507c0, 0xbf6b3580, 0xbf714fc0, 0xbf773100, 0xbf800000,
	}

	tabC2Bits = [32]uint32{
		0x3f8206b8, 0x3f860f3f, 0x3f8a0bf3, 0x3f8e0b80, 0x3f91f5fa, 0x3f95f376, 0x3f99f960, 0x3f9df16b,
		0x3fa1f62a, 0x3fa5f88a, 0x3faa06f8, 0x3fae0369, 0x3fb20d0c, 0x3fb60ebd, 0x3fba0b4b, 0x3fbe059f,
		0x3fc20e3c, 0x3fc60e31, 0x3fc9f291, 0x3fcdfc3a, 0x3fd20c31, 0x3fd5f8e0, 0x3fda0bf5, 0x3fde0425,
		0x3fe1f6d0, 0x3fe604f3, 0x3fe9ff37, 0x3fee0e79, 0x3ff2020a, 0x3ff6053b, 0x3ff9f7f1, 0x3ffdf693,
	}

	tabI2Bits = [32]uint32{
		0x3fb5c98a, 0x3fb0516a, 0x3fab39bc, 0x3fa667ea, 0x3fa1f105, 0x3f9da1db, 0x3f998379, 0x3f95a7ec,
		0x3f91f157, 0x3f8e6ad2, 0x3f8b0504, 0x3f87d5c9, 0x3f84c139, 0x3f81d54c, 0x3f7e1a2e, 0x3f78c872,
		0x3f739c9e, 0x3f6eb121, 0x3f6a1777, 0x3f6580c3, 0x3f611079, 0x3f5cefb5, 0x3f58cecd, 0x3f54ee74,
		0x3f513614, 0x3f4d85da, 0x3f4a077f, 0x3f469584, 0x3f435775, 0x3f4027dd, 0x3f3d1ee9, 0x3f3a2560,
	}

	tabH2Bits = [32]uint32{
		0xbf019040, 0xbeec9000, 0xbed6ea00, 0xbec1d300, 0xbeadbc80, 0xbe99d080, 0xbe864200, 0xbe66eb00,
		0xbe41cd00, 0xbe1dad00, 0xbdf40200, 0xbdaf8a00, 0xbd578800, 0xbca81000, 0x3c2fe000, 0x3d28fc00,
		0x3d928e00, 0x3dced600, 0x3e042b00, 0x3e216a00, 0x3e3e4400, 0x3e599d00, 0x3e757b00, 0x3e881100,
		0x3e951600, 0x3ea23980, 0x3eaee380, 0x3ebb9800, 0x3ec7c100, 0x3ed3e680, 0x3edfa900, 0x3eeb5f00,
	}
)

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
