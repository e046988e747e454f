//go:build !((ppc64le && !ppc64le.power9) || (ppc64 && !ppc64.power9))

package blockmax

// builtinMaxIsCall is false: here the builtin max on float32 is one
// instruction (maxss sequence on amd64, fmaxs on arm64, wfmaxsb on s390x,
// xsmaxjdp on POWER9 and later).
const builtinMaxIsCall = false
