//go:build !amd64 || purego

package sampler

import "github.com/tpcoord/tpcoord/internal/blockmax"

// active is the implementation of the hot passes in use: the portable
// passes, with the fastest block-max kernel this machine runs (the vector
// one on s390x with the vector-enhancements facility, and on ppc64le; in a
// purego build the portable one).
var active = &goKernels

// kernelImpls lists every implementation this machine can run, for the
// equivalence tests. A portable set with another block-max kernel is not
// listed: its other passes are goKernels', and internal/blockmax tests its
// block-max kernels.
var kernelImpls = []*kernels{&goKernels}

func init() {
	if blockmax.Best != &blockmax.Go {
		k := goKernels
		k.name, k.blockMax = "go+"+blockmax.Best.Name, blockmax.Best
		active = &k
	}
}
