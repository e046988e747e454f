//go:build !purego

package sampler

import (
	"golang.org/x/sys/cpu"

	"github.com/tpcoord/tpcoord/internal/blockmax"
)

// AVX2 kernels (kernels_amd64.s). They take the same arguments as the Go
// kernels, with the lengths documented on the kernels fields.

//go:noescape
func scoreMaxAVX2(l, g []float32, invT, floor float32) float32

//go:noescape
func expSumAVX2(l []float32, c *expSumArgs, acc *[16]float64, mask []uint16)

//go:noescape
func expSumAVX512(l []float32, c *expSumArgs, acc *[16]float64, mask []uint16)

var avx2Kernels = kernels{name: "avx2", vector: true, blockMax: &blockmax.AVX2, scoreMax: scoreMaxAVX2, expSum: expSumAVX2}

// avx512Kernels differ only in expSum: the other two passes are bound by
// memory bandwidth already with AVX2.
var avx512Kernels = kernels{name: "avx512", vector: true, blockMax: &blockmax.AVX2, scoreMax: scoreMaxAVX2, expSum: expSumAVX512}

// expTable holds fastExp's constants, each repeated over the 8 lanes of a
// YMM register, computed with the same conversions as fastExp so the two
// cannot disagree.
var expTable [8][8]float32

func init() {
	c := [8]float32{
		float32(1.4426950408889634), // log2e
		float32(0.693145751953125),  // ln2hi
		float32(1.428606765330187e-06),
		float32(1.0 / 720),
		float32(1.0 / 120),
		float32(1.0 / 24),
		float32(1.0 / 6),
		-86,
	}
	for i, v := range c {
		for j := range expTable[i] {
			expTable[i][j] = v
		}
	}
}

// active is the implementation of the hot passes in use.
var active = &goKernels

// kernelImpls lists every implementation this machine can run, for the
// equivalence tests.
var kernelImpls = []*kernels{&goKernels}

func init() {
	if cpu.X86.HasAVX2 {
		active = &avx2Kernels
		kernelImpls = append(kernelImpls, &avx2Kernels)
	}
	if cpu.X86.HasAVX2 && cpu.X86.HasAVX512F {
		active = &avx512Kernels
		kernelImpls = append(kernelImpls, &avx512Kernels)
	}
}
