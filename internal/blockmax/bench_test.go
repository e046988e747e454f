package blockmax

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkKernels: each kernel over a row of 100352 values, one row
// (which stays in cache) and 32 rows in turn (streamed from memory), and
// the two portable definitions alone.
//
//	go test -run '^$' -bench . ./internal/blockmax/
//	go test -tags purego -run '^$' -bench . ./internal/blockmax/
func BenchmarkKernels(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	kernels := append([]*Kernel{}, Impls...)
	kernels = append(kernels, &Kernel{Name: "go-compare", blocks: blocksWith(ofCompare)}, &Kernel{Name: "go-builtin", blocks: blocksWith(ofBuiltin)})
	for _, nrows := range []int{1, 32} {
		rows := make([][]float32, nrows)
		for i := range rows {
			rows[i] = make([]float32, 100352)
			for j := range rows[i] {
				rows[i][j] = float32(r.NormFloat64())
			}
		}
		out := make([]float32, Count(100352))
		for _, k := range kernels {
			b.Run(fmt.Sprintf("kernel=%s/rows=%d", k.Name, nrows), func(b *testing.B) {
				for b.Loop() {
					for _, row := range rows {
						k.Row(row, out)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*nrows*100352), "ns/value")
			})
		}
	}
}

// blocksWith is a whole-block kernel from one portable definition.
func blocksWith(of func([]float32) (float32, bool)) func(v, out []float32) bool {
	return func(v, out []float32) bool {
		nan := false
		for b := range out {
			m, n := of(v[b<<Shift : (b+1)<<Shift])
			out[b], nan = m, nan || n
		}
		return nan
	}
}
