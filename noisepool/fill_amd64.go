//go:build amd64 && !purego

package noisepool

import (
	"math"

	"golang.org/x/sys/cpu"
)

//go:generate go run gen_amd64.go -groups 6

// useAVX512 selects the AVX-512 kernels (fill_amd64.s, written by
// gen_amd64.go). They perform the same IEEE float32 operations as
// GumbelFromBits, without fused multiply-adds, so their output is
// bit-identical to the portable kernels: for all 2^32 inputs
// (TestMonotoneExhaustive), for every length and tail
// (TestKernelsMatchScalar, TestFillRowMatchesScalar) and for pinned rows
// (TestGolden). Tests switch it off to run the portable path here too.
var useAVX512 = cpu.X86.HasAVX512F && cpu.X86.HasAVX512DQ

// kernelConsts is the constant table the assembly broadcasts; its layout is
// fixed by the offsets in fill_amd64.s.
type kernelConsts struct {
	d [24]uint32 // 32-bit lanes; offsets named in gen_amd64.go
	q [3]uint64  // 64-bit lanes: SplitMix64 multipliers and the 8-lane counter step
}

var kconsts = newKernelConsts()

func newKernelConsts() kernelConsts {
	var step8 uint64 = golden
	step8 *= 8
	f := math.Float32bits
	return kernelConsts{
		d: [24]uint32{
			0:  f(0x1p-33),
			1:  0x3f800000 - 0x3f3504f3,
			2:  0x007fffff,
			3:  0x3f3504f3,
			4:  0x7f,
			5:  oneMinusSqrtHalfBits,
			6:  0x80000000,
			7:  1,
			8:  f(1),
			9:  f(logP0),
			10: f(logP1),
			11: f(logP2),
			12: f(logP3),
			13: f(logP4),
			14: f(logP5),
			15: f(logP6),
			16: f(logP7),
			17: f(logP8),
			18: f(ln2Lo),
			19: f(0.5),
			20: f(ln2Hi),
			21: 0x3f800000 - 0x3f3504f3 + 0x80000000,
			22: oneMinusSqrtHalfBits + 1,
		},
		q: [3]uint64{0xbf58476d1ce4e5b9, 0x94d049bb133111eb, step8},
	}
}

// fillAVX512 sets dst[16m+j] = GumbelFromBits of the j-th 32-bit half of
// mix64(ctr[0] + (8m + j/2)·golden), for n values; n is a multiple of 16 and
// ctr[j] = ctr[0] + j·golden.
//
//go:noescape
func fillAVX512(ctr *[8]uint64, k *kernelConsts, dst *float32, n int)

// gumbelBitsAVX512 sets dst[i] = GumbelFromBits(src[i]) for n values, n a
// multiple of 16.
//
//go:noescape
func gumbelBitsAVX512(k *kernelConsts, src *uint32, dst *float32, n int)

// fillRow sets dst[i] = GumbelFromBits(Bits(seed, first+i)); first must be even.
func fillRow(seed uint64, first int, dst []float32) {
	if n := len(dst) &^ 15; useAVX512 && n > 0 {
		var ctr [8]uint64
		for j := range ctr {
			ctr[j] = seed + uint64(first>>1+j)*golden
		}
		fillAVX512(&ctr, &kconsts, &dst[0], n)
		dst, first = dst[n:], first+n
	}
	fillRowGeneric(seed, first, dst)
}

// gumbelBits sets dst[i] = GumbelFromBits(src[i]); len(dst) >= len(src).
func gumbelBits(src []uint32, dst []float32) {
	dst = dst[:len(src)]
	if n := len(src) &^ 15; useAVX512 && n > 0 {
		gumbelBitsAVX512(&kconsts, &src[0], &dst[0], n)
		src, dst = src[n:], dst[n:]
	}
	gumbelBitsGeneric(src, dst)
}
