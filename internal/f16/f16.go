package f16

import "math"

// HalfToFloat32 converts binary16 bits to the float32 of the same value
// (exact; subnormals, infinities and NaN payloads included).
func HalfToFloat32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	em := uint32(h & 0x7fff) // exponent and mantissa
	if em-0x0400 < 0x7800 {
		// Normal (the common case, one branch): rebias the exponent
		// from 15 to 127 and widen the mantissa from 10 to 23 bits.
		return math.Float32frombits(sign | (em<<13 + 112<<23))
	}
	if em < 0x0400 {
		// Zero or subnormal: em · 2^-24, exact in float32.
		f := float32(em) * (1.0 / (1 << 24))
		return math.Float32frombits(math.Float32bits(f) | sign)
	}
	return math.Float32frombits(sign | 0x7f800000 | (em&0x3ff)<<13) // Inf, NaN
}

// BFloat16ToFloat32 converts bfloat16 bits to float32 (exact: bfloat16 is
// the upper half of a float32).
func BFloat16ToFloat32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// Float32ToHalf rounds f to the nearest binary16 value, ties to even.
// Magnitudes from 65520 up become ±Inf; NaN becomes a quiet NaN of the
// same sign; values under the smallest subnormal round to ±0.
func Float32ToHalf(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23&0xff) - 127 + 15
	man := b & 0x7fffff
	switch {
	case b&0x7fffffff > 0x7f800000: // NaN
		return sign | 0x7e00
	case exp >= 0x1f: // overflow or Inf
		return sign | 0x7c00
	case exp <= 0: // subnormal or zero
		return sign | subnormalHalf(exp, man)
	}
	h := uint32(exp)<<10 | man>>13
	rem := man & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && h&1 == 1) {
		h++ // may carry into the exponent, which is the right rounding
	}
	return sign | uint16(h)
}

// subnormalHalf rounds 1.man · 2^(exp-15) with exp <= 0 to a binary16
// subnormal (or zero, or the smallest normal when it rounds up to it).
func subnormalHalf(exp int32, man uint32) uint16 {
	if exp < -10 {
		return 0 // under half the smallest subnormal
	}
	man |= 0x800000
	shift := uint32(14 - exp)
	h := man >> shift
	rem := man & (1<<shift - 1)
	half := uint32(1) << (shift - 1)
	if rem > half || (rem == half && h&1 == 1) {
		h++
	}
	return uint16(h)
}

// Float32ToBFloat16 rounds f to the nearest bfloat16 value, ties to even.
// Finite values past the largest bfloat16 become ±Inf; NaN becomes a quiet
// NaN with f's sign and upper payload bits.
func Float32ToBFloat16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// WidenHalf converts binary16 bits from src into dst, as copy does:
// min(len(dst), len(src)) elements, which it returns.
func WidenHalf(dst []float32, src []uint16) int {
	n := min(len(dst), len(src))
	dst, src = dst[:n], src[:n]
	for i, h := range src {
		dst[i] = HalfToFloat32(h)
	}
	return n
}

// WidenBFloat16 converts bfloat16 bits from src into dst, as copy does.
func WidenBFloat16(dst []float32, src []uint16) int {
	n := min(len(dst), len(src))
	dst, src = dst[:n], src[:n]
	for i, h := range src {
		dst[i] = math.Float32frombits(uint32(h) << 16)
	}
	return n
}

// NarrowHalf rounds float32 values from src into binary16 bits in dst, as
// copy does.
func NarrowHalf(dst []uint16, src []float32) int {
	n := min(len(dst), len(src))
	dst, src = dst[:n], src[:n]
	for i, f := range src {
		dst[i] = Float32ToHalf(f)
	}
	return n
}

// NarrowBFloat16 rounds float32 values from src into bfloat16 bits in dst,
// as copy does.
func NarrowBFloat16(dst []uint16, src []float32) int {
	n := min(len(dst), len(src))
	dst, src = dst[:n], src[:n]
	for i, f := range src {
		dst[i] = Float32ToBFloat16(f)
	}
	return n
}
