//go:build (ppc64le && !ppc64le.power9) || (ppc64 && !ppc64.power9)

package blockmax

// builtinMaxIsCall: built for POWER8 (GOPPC64=power8, the default), Go
// compiles the builtin max on float32 to a call to runtime.fmax32, since
// xsmaxjdp is a POWER9 instruction; Of then branches instead.
const builtinMaxIsCall = true
