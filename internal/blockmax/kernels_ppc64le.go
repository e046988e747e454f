//go:build !purego

package blockmax

// blocksVMX writes the raw maximum of every block of v into out (the
// vector kernel of kernels_ppc64le.s): NaN if the block holds a NaN; a
// zero, of either sign, if its maximum is a zero or a denormal.
//
//go:noescape
func blocksVMX(v, out []float32)

// blocksPPC64LE is the ppc64le kernel: the vector pass, then the blocks it
// leaves open, redone in Go: a block holding a NaN by ofNaN (the maximum
// of the rest, and the flag), a block with a zero result by Of (its
// maximum may be a denormal, which VMAXFP reads as a zero in the VMX
// non-Java mode Linux runs in).
func blocksPPC64LE(v, out []float32) bool {
	blocksVMX(v, out)
	nan := false
	for b, m := range out {
		switch {
		case m != m:
			out[b], _ = ofNaN(v[b<<Shift : (b+1)<<Shift])
			nan = true
		case m == 0:
			out[b], _ = Of(v[b<<Shift : (b+1)<<Shift])
		}
	}
	return nan
}

// VMX is the ppc64le vector kernel (VMAXFP). Every ppc64le machine has
// the vector facility (POWER8 is the least the port runs on).
var VMX = Kernel{Name: "vmx", blocks: blocksPPC64LE}

// Best is the fastest kernel this machine runs.
var Best = &VMX

// Impls lists every kernel this machine runs, for the equivalence tests.
var Impls = []*Kernel{&Go, &VMX}
