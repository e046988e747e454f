package stats

import (
	"cmp"
	"math"
	"slices"

	"github.com/tpcoord/tpcoord/internal/stats"
)

// Median is the middle value of v, the mean of the two middle ones for an
// even count, 0 for none. v is not modified. It is the module's one median,
// internal/stats.Median, here so that a benchmark uses one stats package.
func Median(v []float64) float64 { return stats.Median(v) }

// Nearest is the nearest-rank q-quantile of sorted (ascending) values: the
// smallest value with at least a share q of the values at or below it.
// The zero value for none.
func Nearest[T cmp.Ordered](sorted []T, q float64) T {
	if len(sorted) == 0 {
		var zero T
		return zero
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// Quantile is the nearest-rank q-quantile of v (in any order; v is not
// modified), 0 for none.
func Quantile(v []float64, q float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return Nearest(s, q)
}

// Quantiles are the nearest-rank median, p90 and p99 of v (in any order;
// v is not modified), zeros for none.
func Quantiles(v []float64) (p50, p90, p99 float64) {
	s := slices.Clone(v)
	slices.Sort(s)
	return Nearest(s, 0.50), Nearest(s, 0.90), Nearest(s, 0.99)
}

// US converts nanoseconds to microseconds.
func US(ns int64) float64 { return float64(ns) / 1e3 }

// Ratio is a over b, 0 when b is not positive (a run that measured
// nothing compares as 0, not as Inf or NaN).
func Ratio(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}
