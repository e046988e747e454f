package sampler

import "github.com/tpcoord/tpcoord/internal/f16"

// convertRow widens a 16-bit row into dst (len(src) elements). The loop
// lives in f16, where the scalar conversion inlines into it.
func convertRow(dst []float32, src []uint16, dt Dtype) {
	if dt == BFloat16 {
		f16.WidenBFloat16(dst, src)
		return
	}
	f16.WidenHalf(dst, src)
}
