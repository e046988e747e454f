// Package noise is `tpcoord bench noise`: the time to generate Gumbel
// noise (noisepool.FillRow with several goroutines, the scalar Go path,
// a math.Log baseline) and to take rows from a warm noisepool.Pool, in
// this process.
package noise
