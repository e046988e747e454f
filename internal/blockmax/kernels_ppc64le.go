//go:build !purego

package blockmax

// blocksVMX writes the raw maximum of every block of v into out (the
// vector kernel of kernels_ppc64le.s): NaN if the block holds a NaN; a
// zero, of either sign, if its maximum is a zero, or a denormal that the
// VMX non-Java mode reads as a zero.
//
//go:noescape
func blocksVMX(v, out []float32)

// blocksPPC64LE is the ppc64le kernel: the vector pass, then settle: a
// block holding a NaN is redone, and so is a block with a zero result,
// exactly (Of): its maximum may be a denormal, which VMAXFP reads as a
// zero in the VMX non-Java mode Linux runs in.
func blocksPPC64LE(v, out []float32) bool {
	blocksVMX(v, out)
	return settle(v, out, func(block []float32) float32 { m, _ := Of(block); return m })
}

// VMX is the ppc64le vector kernel (VMAXFP). Every ppc64le machine has
// the vector facility (POWER8 is the least the port runs on).
var VMX = Kernel{Name: "vmx", blocks: blocksPPC64LE}

// Best is the fastest kernel this machine runs.
var Best = &VMX

// Impls lists every kernel this machine runs, for the equivalence tests.
var Impls = []*Kernel{&Go, &VMX}
