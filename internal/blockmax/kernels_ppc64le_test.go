//go:build !purego

package blockmax

import (
	"math"
	"testing"
)

// TestVMXZeroResults: the blocks the vector pass leaves as a zero (a
// denormal or zero maximum) are redone exactly, whether or not the CPU
// reads denormals as zeros. Each block's maximum is planted among −1s.
func TestVMXZeroResults(t *testing.T) {
	for _, top := range []float32{math.Float32frombits(1), math.Float32frombits(0x807fffff),
		math.Float32frombits(0x007fffff), float32(math.Copysign(0, -1)), 0} {
		v := make([]float32, 2*Size)
		for i := range v {
			v[i] = -1
		}
		v[17], v[Size+255] = top, top
		out := make([]float32, 2)
		if VMX.Row(v, out) {
			t.Fatalf("max %v: NaN flag set", top)
		}
		want, _ := reference(v[:Size])
		for b, m := range out {
			if math.Float32bits(m) != math.Float32bits(want) {
				t.Errorf("max %v: block %d gives %v (%#x), want %#x", top, b, m, math.Float32bits(m), math.Float32bits(want))
			}
		}
	}
}
