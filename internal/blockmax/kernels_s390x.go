//go:build !purego

package blockmax

import "golang.org/x/sys/cpu"

// blocksVXE writes the raw maximum of every block of v into out (the
// vector kernel of kernels_s390x.s): NaN if the block holds a NaN, a
// zero maximum with either sign.
//
//go:noescape
func blocksVXE(v, out []float32)

// blocksS390X is the s390x kernel: the vector pass, then settle: a block
// holding a NaN is redone, a zero maximum becomes +0.
func blocksS390X(v, out []float32) bool {
	blocksVXE(v, out)
	return settle(v, out, func([]float32) float32 { return 0 })
}

// VXE is the s390x vector kernel (VFMAXSB, from the vector-enhancements
// facility 1 of z14); run it only where Impls lists it.
var VXE = Kernel{Name: "vxe", blocks: blocksS390X}

// Best is the fastest kernel this machine runs.
var Best = &Go

// Impls lists every kernel this machine runs, for the equivalence tests.
var Impls = []*Kernel{&Go}

func init() {
	if cpu.S390X.HasVXE {
		Best = &VXE
		Impls = append(Impls, &VXE)
	}
}
