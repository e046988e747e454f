package noisepool

import "math"

// BlockSize is the number of tokens whose noise a pool row's BlockMax
// bounds together: the sampler's block, so that one compare of a block's
// largest logit and largest noise skips the block without reading its
// noise.
const BlockSize = 256

// BlockCount is the number of blocks of a row of vocab tokens.
func BlockCount(vocab int) int { return (vocab + BlockSize - 1) / BlockSize }

// FillBlockMax sets dst[b] to the largest of
// values[b*BlockSize : (b+1)*BlockSize] (the last block may be shorter).
// len(dst) must be BlockCount(len(values)); values hold no NaN (noise
// never does).
func FillBlockMax(values, dst []float32) {
	dst = dst[:BlockCount(len(values))]
	for b := range dst {
		dst[b] = maxOf(values[b*BlockSize : min((b+1)*BlockSize, len(values))])
	}
}

// maxOf returns the largest of v (len >= 1, no NaN). It compares
// order-preserving integer keys (orderKey), whose max compiles to a
// conditional move: a float compare's branch would mispredict at every
// new maximum, several times in each block of random noise. Four running
// maxima keep the moves from waiting on each other.
func maxOf(v []float32) float32 {
	k := orderKey(v[0])
	m0, m1, m2, m3 := k, k, k, k
	i := 0
	for ; i+4 <= len(v); i += 4 {
		x := v[i : i+4 : i+4]
		m0 = max(m0, orderKey(x[0]))
		m1 = max(m1, orderKey(x[1]))
		m2 = max(m2, orderKey(x[2]))
		m3 = max(m3, orderKey(x[3]))
	}
	for _, x := range v[i:] {
		m0 = max(m0, orderKey(x))
	}
	return fromOrderKey(max(m0, m1, m2, m3))
}

// orderKey maps a float32 that is not NaN to an int32 in the same order
// (-0 just below +0): negative floats have their magnitude bits flipped.
func orderKey(f float32) int32 {
	b := int32(math.Float32bits(f))
	return b ^ (b >> 31 & 0x7fffffff)
}

// fromOrderKey inverts orderKey.
func fromOrderKey(k int32) float32 {
	return math.Float32frombits(uint32(k ^ (k >> 31 & 0x7fffffff)))
}
