package noisepool

import (
	"context"
	"math"
	"runtime"
	"sync/atomic"
	"testing"
)

const benchVocab = 100352

func reportPerValue(b *testing.B, values int) {
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(values), "ns/value")
}

// BenchmarkFillRow is the producer's kernel: one vocab row, one goroutine.
func BenchmarkFillRow(b *testing.B) { benchFill(b, FillRow) }

// benchFill times fill on one vocab row after another, one goroutine.
func benchFill(b *testing.B, fill func(key, row uint64, dst []float32)) {
	dst := make([]float32, benchVocab)
	b.SetBytes(benchVocab * 4)
	row := uint64(0)
	for b.Loop() {
		fill(1, row, dst)
		row++
	}
	reportPerValue(b, benchVocab)
}

// BenchmarkFillRowParallel fills rows on every core at once (as several
// producers do); ns/value-core is wall time × GOMAXPROCS per value.
func BenchmarkFillRowParallel(b *testing.B) {
	b.SetBytes(benchVocab * 4)
	var next atomic.Uint64
	b.RunParallel(func(pb *testing.PB) {
		dst := make([]float32, benchVocab)
		for pb.Next() {
			FillRow(2, next.Add(1), dst)
		}
	})
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())*float64(runtime.GOMAXPROCS(0))/float64(b.N)/benchVocab, "ns/value-core")
}

// BenchmarkFillRowPortable is FillRow with the vector kernel switched off
// (the pure-Go path every other architecture uses).
func BenchmarkFillRowPortable(b *testing.B) {
	saved := useAVX512
	defer func() { useAVX512 = saved }()
	useAVX512 = false
	BenchmarkFillRow(b)
}

// BenchmarkFillBoundRow fills a bound row (FormBound): the hash and one
// table load per value, the same code on every architecture.
func BenchmarkFillBoundRow(b *testing.B) { benchFill(b, FillBoundRow) }

// BenchmarkFillBlockMax is the pool's pass over a filled row for its
// block maxima.
func BenchmarkFillBlockMax(b *testing.B) {
	v := make([]float32, benchVocab)
	FillRow(1, 0, v)
	dst := make([]float32, BlockCount(benchVocab))
	for b.Loop() {
		FillBlockMax(v, dst)
	}
	reportPerValue(b, benchVocab)
}

// BenchmarkFillRowNaive is the naive Go loop the issue compares against:
// the same hash, then float64 math.Log twice per value.
func BenchmarkFillRowNaive(b *testing.B) {
	dst := make([]float32, benchVocab)
	b.SetBytes(benchVocab * 4)
	row := uint64(0)
	for b.Loop() {
		seed := RowSeed(1, row)
		for i := range dst {
			u := (float64(Bits(seed, i)) + 0.5) * 0x1p-32
			dst[i] = float32(-math.Log(-math.Log(u)))
		}
		row++
	}
	reportPerValue(b, benchVocab)
}

// BenchmarkGumbelScalar calls the scalar Gumbel per value (the inline path
// for a single token).
func BenchmarkGumbelScalar(b *testing.B) {
	dst := make([]float32, 4096)
	row := uint64(0)
	for b.Loop() {
		for i := range dst {
			dst[i] = Gumbel(1, row, i)
		}
		row++
	}
	reportPerValue(b, len(dst))
}

// BenchmarkFillIndicesTopK50 is a top-k row: 50 values at scattered indices.
func BenchmarkFillIndicesTopK50(b *testing.B) {
	idx := make([]int32, 50)
	for j := range idx {
		idx[j] = int32(j * 2003 % benchVocab)
	}
	dst := make([]float32, len(idx))
	row := uint64(0)
	for b.Loop() {
		FillIndices(1, row, idx, dst)
		row++
	}
	reportPerValue(b, len(idx))
}

// benchTakeBatch takes a batch of 32 rows (vocab 100352) and releases them,
// one decode step per iteration. With warm set, the timer stops while the
// producers refill the pool, so ns/op is the latency of taking a batch from
// a warm pool; without it the pool has no producers and every row is inline.
func benchTakeBatch(b *testing.B, producers int, warm bool) {
	const batch = 32
	cfg := DefaultConfig()
	cfg.Vocab, cfg.Producers, cfg.Lookahead = benchVocab, producers, 1
	cfg.Rows = 2*batch + producers
	p, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	keys := make([]uint64, batch)
	for i := range keys {
		keys[i] = StreamKey(nil, 7, uint64(i))
		p.Activate(keys[i], 0)
	}
	rows := make([]Row, batch)
	step := uint64(0)
	for b.Loop() {
		if warm {
			b.StopTimer()
			if err := p.Warm(context.Background()); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
		for i, k := range keys {
			if rows[i], err = p.Take(k, step); err != nil {
				b.Fatal(err)
			}
		}
		for _, r := range rows {
			p.Release(r)
		}
		step++
	}
	s := p.Stats()
	b.ReportMetric(float64(s.Inline)/float64(s.Taken), "inline/row")
}

func BenchmarkTakeBatch32Warm(b *testing.B)   { benchTakeBatch(b, 1, true) }
func BenchmarkTakeBatch32Inline(b *testing.B) { benchTakeBatch(b, 0, false) }
