package sampler

import "math"

// fastExp returns e^x for x <= 0 with a relative error below 2e-7, and 0
// below -86 (where float32 would go subnormal). It is the weight function of
// both the fast top-p pass and Reference's softmax. Every intermediate is
// rounded with an explicit float32 conversion so no architecture fuses a
// multiply-add and the result is the same bits on amd64, s390x and ppc64le.
func fastExp(x float32) float32 {
	if !(x >= -86) { // also NaN and -Inf
		return 0
	}
	const log2e = 1.4426950408889634
	t := float32(x * log2e)
	// n = round(t), t in [-124.1, 0], so 2^n stays normal.
	n := float32(int32(t - 0.5))
	if t-n >= 0.5 {
		n++
	}
	// r = x - n·ln2 with a two-part ln2 (Cody–Waite): n·ln2hi is exact.
	const ln2hi, ln2lo = 0.693145751953125, 1.428606765330187e-06
	r := float32(float32(x-float32(n*ln2hi)) - float32(n*ln2lo)) // |r| <= 0.347
	// e^r, Taylor to degree 6: error 0.347^7/7! < 1.3e-7.
	p := float32(1.0 / 720)
	p = float32(float32(p*r) + 1.0/120)
	p = float32(float32(p*r) + 1.0/24)
	p = float32(float32(p*r) + 1.0/6)
	p = float32(float32(p*r) + 0.5)
	p = float32(float32(p*r) + 1)
	p = float32(float32(p*r) + 1)
	return math.Float32frombits(uint32(int32(math.Float32bits(p)) + int32(n)<<23))
}

// orderedKey maps float32 to uint32 so that a < b implies key(a) < key(b)
// for all non-NaN values (-0 and +0 get adjacent keys).
func orderedKey(f float32) uint32 {
	b := math.Float32bits(f)
	if b&0x80000000 != 0 {
		return ^b
	}
	return b | 0x80000000
}

func fromOrderedKey(k uint32) float32 {
	if k&0x80000000 != 0 {
		return math.Float32frombits(k &^ 0x80000000)
	}
	return math.Float32frombits(^k)
}
