package noisepool

import "math"

// blk is the block of values the portable kernel processes stage by stage.
// Short stage loops over independent values let the CPU overlap the
// dependency chains of the two logs.
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

// gumbelBlock sets out[j] = GumbelFromBits(bits[j]), stage by stage and
// without branches on the data.
func gumbelBlock(bits *[blk]uint32, out *[blk]float32) {
	var r, t [blk]float32
	for i := range blk {
		b := bits[i]
		upper := uint32(int32(b) >> 31)
		c := b ^ upper
		q := float32(2*c+1) * 0x1p-33
		qb := math.Float32bits(q)
		// oneMinusRZ(q) without a branch: (1-y)-q is negative exactly
		// when 1-y < q, and its sign bit is then 1.
		y := 1 - q
		yb := math.Float32bits(y) - math.Float32bits(float32(1-y)-q)>>31
		fl := math.Float32bits(math.Float32frombits(qb&0x007fffff|0x3f800000) - 2)
		fu := math.Float32bits(q * -2)
		f := math.Float32frombits(fl ^ (fl^fu)&upper)
		xb := qb ^ (qb^yb)&upper
		j := xb >> 18 & 31
		r[i] = float32(float32(f-tabT[j]) * tabI[j])
		t[i] = tabNH[j] - getexp(xb)
	}
	for i := range blk {
		out[i] = t[i] - log2p1(r[i])
	}
	for i := range blk {
		eb := math.Float32bits(out[i])
		j := eb >> 18 & 31
		m := math.Float32frombits(eb&0x007fffff | 0x3f800000)
		r[i] = float32(float32(m-tabC2[j]) * tabI2[j])
		t[i] = getexp(eb) + tabH2[j]
	}
	for i := range blk {
		out[i] = float32(float32(t[i]+log2p1(r[i])) * negLn2)
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
