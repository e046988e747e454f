package noisepool

import "math"

// blk is the block of values the portable kernel processes stage by stage.
// Short stage loops over independent values let the CPU overlap the long
// dependency chains of the two polynomial logs; one loop body holding the
// whole computation was 1.6x slower.
const blk = 32

// fillRowGeneric is the portable FillRow kernel: it sets
// dst[i] = GumbelFromBits(Bits(seed, first+i)) for an even first, doing the
// same float32 operations in the same order as GumbelFromBits.
func fillRowGeneric(seed uint64, first int, dst []float32) {
	ctr := seed + uint64(first>>1)*golden
	var bits [blk]uint32
	for len(dst) >= blk {
		out := (*[blk]float32)(dst)
		for j := 0; j < blk; j += 2 {
			h := mix64(ctr)
			ctr += golden
			bits[j] = uint32(h)
			bits[j+1] = uint32(h >> 32)
		}
		gumbelBlock(&bits, out)
		dst = dst[blk:]
	}
	for i := range dst { // tail shorter than blk
		dst[i] = GumbelFromBits(uint32(mix64(ctr) >> (32 * uint(i&1))))
		if i&1 == 1 {
			ctr += golden
		}
	}
}

// gumbelBlock sets out[j] = GumbelFromBits(bits[j]), stage by stage.
func gumbelBlock(bits *[blk]uint32, out *[blk]float32) {
	var f, kf [blk]float32
	for j := range blk {
		b := bits[j]
		upper := uint32(int32(b) >> 31)
		c := b ^ upper
		q := float32(2*c+1) * 0x1p-33
		qb := math.Float32bits(q)
		xb := qb + (0x3f800000 - 0x3f3504f3)
		k1 := uint32(int32(xb>>23) - 0x7f)
		f1 := math.Float32bits(math.Float32frombits(xb&0x007fffff+0x3f3504f3) - 1)
		big := uint32(int32(oneMinusSqrtHalfBits-qb) >> 31)
		nq := qb | 0x80000000
		f2 := nq ^ ((nq ^ math.Float32bits(1-float32(2*q))) & big)
		f[j] = math.Float32frombits(f1 ^ ((f1 ^ f2) & upper))
		kf[j] = float32(int32(k1 ^ ((k1 ^ big) & upper)))
	}
	for j := range blk {
		f0, k0 := f[j], kf[j]
		z := float32(f0 * f0)
		y := float32(logP0)
		y = float32(y*f0) + logP1
		y = float32(y*f0) + logP2
		y = float32(y*f0) + logP3
		y = float32(y*f0) + logP4
		y = float32(y*f0) + logP5
		y = float32(y*f0) + logP6
		y = float32(y*f0) + logP7
		y = float32(y*f0) + logP8
		y = float32(float32(y*f0) * z)
		y += float32(k0 * ln2Lo)
		y -= float32(0.5 * z)
		r := f0 + y
		out[j] = -(r + float32(k0*ln2Hi))
	}
	for j := range blk {
		xb := math.Float32bits(out[j]) + (0x3f800000 - 0x3f3504f3)
		kf[j] = float32(int32(xb>>23) - 0x7f)
		f[j] = math.Float32frombits(xb&0x007fffff+0x3f3504f3) - 1
	}
	for j := range blk {
		f0, k0 := f[j], kf[j]
		z := float32(f0 * f0)
		y := float32(logP0)
		y = float32(y*f0) + logP1
		y = float32(y*f0) + logP2
		y = float32(y*f0) + logP3
		y = float32(y*f0) + logP4
		y = float32(y*f0) + logP5
		y = float32(y*f0) + logP6
		y = float32(y*f0) + logP7
		y = float32(y*f0) + logP8
		y = float32(float32(y*f0) * z)
		y += float32(k0 * ln2Lo)
		y -= float32(0.5 * z)
		r := f0 + y
		out[j] = -(r + float32(k0*ln2Hi))
	}
}

// gumbelBitsGeneric sets dst[i] = GumbelFromBits(src[i]) through the block
// kernel; len(dst) == len(src).
func gumbelBitsGeneric(src []uint32, dst []float32) {
	for len(src) >= blk {
		gumbelBlock((*[blk]uint32)(src), (*[blk]float32)(dst))
		src, dst = src[blk:], dst[blk:]
	}
	for i, b := range src {
		dst[i] = GumbelFromBits(b)
	}
}
