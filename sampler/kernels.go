package sampler

import (
	"math"

	"github.com/tpcoord/tpcoord/internal/blockmax"
)

// The three passes that touch every token of a row are kernels with a
// pure-Go definition and, on amd64, vector versions that must return the
// same bits for every input (kernels_test.go checks it; for blockMax,
// internal/blockmax's tests). Each kernel's
// result is defined so that it does not depend on the order in which lanes
// are combined:
//
//   - blockMax: per 256-token block the maximum over non-NaN values, zero
//     as +0, and a flag for any NaN (package internal/blockmax, which the
//     noise pool's block maxima use too).
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
	vector   bool
	blockMax *blockmax.Kernel
	// scoreMax: len(l) == len(g), a multiple of 8.
	scoreMax func(l, g []float32, invT, floor float32) float32
	// expSum: len(l) a multiple of 16, len(mask) == len(l)/16.
	expSum func(l []float32, c *expSumArgs, acc *[16]float64, mask []uint16)
}

// expSumArgs are the per-row constants of the top-p weight pass.
type expSumArgs struct {
	invT, smax, M, dh float32
}

var goKernels = kernels{name: "go", blockMax: &blockmax.Go, scoreMax: scoreMaxGo, expSum: expSumGo}

// scoreMaxOf returns the scoreMax of l and g (equal lengths).
func (k *kernels) scoreMaxOf(l, g []float32, invT, floor float32) float32 {
	n := len(l) &^ 7
	m := k.scoreMax(l[:n], g[:n], invT, floor)
	if n < len(l) {
		m = blockmax.Max(m, scoreMaxGo(l[n:], g[n:len(l)], invT, floor))
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
	return blockmax.Max(blockmax.Max(m0, m1), blockmax.Max(m2, m3))
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
