//go:build !purego

package blockmax

import "golang.org/x/sys/cpu"

// blocksAVX2 is the AVX2 kernel (kernels_amd64.s), with blocksGo's
// arguments.
//
//go:noescape
func blocksAVX2(v, out []float32) (nan bool)

// AVX2 is the AVX2 kernel; run it only where Impls lists it.
var AVX2 = Kernel{Name: "avx2", blocks: blocksAVX2}

// Best is the fastest kernel this machine runs.
var Best = &Go

// Impls lists every kernel this machine runs, for the equivalence tests.
var Impls = []*Kernel{&Go}

func init() {
	if cpu.X86.HasAVX2 {
		Best = &AVX2
		Impls = append(Impls, &AVX2)
	}
}
