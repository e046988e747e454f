//go:build amd64 && !purego

package noisepool

import (
	"math"
	"unsafe"

	"golang.org/x/sys/cpu"
)

//go:generate go run gen_amd64.go -groups 6

// useAVX512 selects the AVX-512 kernels (fill_amd64.s, written by
// gen_amd64.go). They perform the same IEEE float32 operations as
// GumbelFromBits (VGETEXPPS, VGETMANTPS and VPERMT2PS table lookups are
// exact; 1-q is rounded toward zero in both), without fused
// multiply-adds, so their output is
// bit-identical to the portable kernels: for all 2^32 inputs
// (TestMonotoneExhaustive), for every length and tail
// (TestKernelsMatchScalar, TestFillRowMatchesScalar) and for pinned rows
// (TestGolden). Tests switch it off to run the portable path here too.
var useAVX512 = cpu.X86.HasAVX512F && cpu.X86.HasAVX512DQ

// kernelConsts is the constant table the assembly reads; its layout is fixed
// by the offsets in gen_amd64.go. The tables are read whole by VMOVUPS and
// VPERMT2PS, so the block is 64-byte aligned (kconsts points into kbuf).
type kernelConsts struct {
	tab [6][32]float32 // tabT, tabI, tabNH, tabC2, tabI2, tabH2
	d   [8]uint32      // 32-bit lanes: 1, 2^-33, -2, 1.0, p0, p1, -ln 2
	q   [10]uint64     // 64-bit lanes: SplitMix64 multipliers, g·8·golden for g = 1..8
}

var (
	kbuf    [unsafe.Sizeof(kernelConsts{}) + 64]byte
	kconsts = newKernelConsts()
)

func newKernelConsts() *kernelConsts {
	p := unsafe.Pointer(&kbuf[0])
	k := (*kernelConsts)(unsafe.Add(p, (64-uintptr(p)%64)%64))
	k.tab = [6][32]float32{tabT, tabI, tabNH, tabC2, tabI2, tabH2}
	f := math.Float32bits
	k.d = [8]uint32{1, f(0x1p-33), f(-2), f(1), f(logP0), f(logP1), f(negLn2)}
	k.q[0], k.q[1] = 0xbf58476d1ce4e5b9, 0x94d049bb133111eb
	for g := range uint64(8) {
		var step uint64 = golden
		k.q[2+g] = (g + 1) * 8 * step
	}
	return k
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
		fillAVX512(&ctr, kconsts, &dst[0], n)
		dst, first = dst[n:], first+n
	}
	fillRowGeneric(seed, first, dst)
}

// gumbelBits sets dst[i] = GumbelFromBits(src[i]); len(dst) >= len(src).
func gumbelBits(src []uint32, dst []float32) {
	dst = dst[:len(src)]
	if n := len(src) &^ 15; useAVX512 && n > 0 {
		gumbelBitsAVX512(kconsts, &src[0], &dst[0], n)
		src, dst = src[n:], dst[n:]
	}
	gumbelBitsGeneric(src, dst)
}
