// Package stats holds what every tpcoord benchmark reports alike: the
// statistics over its samples (Median, nearest-rank percentiles, µs), the
// machine it ran on, and its output as JSON lines. The benchmarks
// themselves are its sibling packages under cmd/tpcoord/internal/bench.
package stats
