//go:build !amd64 || purego

package noisepool

// useAVX512 is false: there is no vector kernel here. (A variable, so that
// tests can set it on every architecture.)
var useAVX512 = false

// fillRow sets dst[i] = GumbelFromBits(Bits(seed, first+i)); first must be even.
func fillRow(seed uint64, first int, dst []float32) { fillRowGeneric(seed, first, dst) }

// gumbelBits sets dst[i] = GumbelFromBits(src[i]); len(dst) >= len(src).
func gumbelBits(src []uint32, dst []float32) { gumbelBitsGeneric(src, dst[:len(src)]) }
