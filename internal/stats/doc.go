// Package stats is the module's one implementation of the statistics that
// tests, benchmarks and scripts alike report over their samples: for now
// the median. The benchmarks' own helpers (nearest-rank percentiles, their
// JSON lines) stay in cmd/tpcoord/internal/bench/stats, which uses this.
package stats
