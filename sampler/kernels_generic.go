//go:build !amd64 || purego

package sampler

// active is the implementation of the hot passes in use.
var active = &goKernels

// kernelImpls lists every implementation this machine can run, for the
// equivalence tests.
var kernelImpls = []*kernels{&goKernels}
