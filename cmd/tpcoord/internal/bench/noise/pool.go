package noise

import (
	"context"
	"runtime"
	"time"

	"github.com/tpcoord/tpcoord/cmd/tpcoord/internal/bench/stats"
	"github.com/tpcoord/tpcoord/noisepool"
)

// poolTake times taking TakeRows rows, one per active stream, from a pool
// whose producers had time to fill every row ahead (Warm).
func poolTake(ctx context.Context, o Options) (Result, error) {
	cfg := noisepool.DefaultConfig()
	cfg.Vocab = o.Vocab
	cfg.Rows = TakeRows * (cfg.Lookahead + 2)
	cfg.Producers = max(1, min(runtime.NumCPU()-1, 2))
	cfg.Form = noisepool.FormExact // the same rows on every host (a warm take does not depend on it)
	cfg.MaxBytes = max(cfg.MaxBytes, cfg.Bytes())
	pool, err := noisepool.New(cfg)
	if err != nil {
		return Result{}, err
	}
	defer pool.Close()
	for k := range TakeRows {
		pool.Activate(uint64(k+1), 0)
	}
	rows := make([]noisepool.Row, TakeRows)
	samples := make([]float64, 0, o.Iters)
	inline := 0
	for it := range o.Iters + 1 {
		if err := pool.Warm(ctx); err != nil {
			return Result{}, err
		}
		d, n, err := takeAll(pool, rows, uint64(it))
		if err != nil {
			return Result{}, err
		}
		if it > 0 { // the first iteration warms up
			samples = append(samples, float64(d.Nanoseconds())/1e3)
			inline += n
		}
	}
	med, p90, p99 := stats.Quantiles(samples)
	return Result{Case: "pool_take32", Producers: cfg.Producers, Vocab: o.Vocab, Rows: TakeRows,
		Iters: o.Iters, Unit: "us_per_take", Median: med, P90: p90, P99: p99, Inline: inline}, nil
}

// takeAll takes row row of every stream into rows (one per stream),
// timed, then releases them (not timed). It returns the time and how many
// rows the pool computed inline.
func takeAll(pool *noisepool.Pool, rows []noisepool.Row, row uint64) (time.Duration, int, error) {
	t0 := time.Now()
	for k := range rows {
		var err error
		if rows[k], err = pool.Take(uint64(k+1), row); err != nil {
			return 0, 0, err
		}
	}
	d := time.Since(t0)
	inline := 0
	for _, r := range rows {
		if r.Inline {
			inline++
		}
		if err := pool.Release(r); err != nil {
			return 0, 0, err
		}
	}
	return d, inline, nil
}
