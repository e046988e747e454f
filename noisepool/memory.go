package noisepool

// rowMemory returns n zeroed float32s for a pool's rows, their pages
// mapped where the system can do that in one call. Fresh memory is mapped
// on its first write, a page fault per page: 12,544 of them for the
// default pool's 51 MB. When rank 0's first steps filled slots never used
// before, each row cost its producer 0.5–1 ms of faults (11 µs each on a
// VM) instead of 45 µs, the producers fell behind and those steps made
// rows inline. On Linux 5.14 and later one madvise(MADV_POPULATE_WRITE)
// maps them when the pool is made (12 ms for 51 MB on that VM). Elsewhere
// the pages are mapped as they are first used, as before: writing a zero
// into each page instead took 135 ms there, and cost a 64-rank start
// 0.24–0.70 s of CPU. On that VM the first write to a mapped page still
// traps to the host; idle producers take that cost later (Pool.touch).
//
// Transparent huge pages (MADV_HUGEPAGE) were measured too and not kept:
// on that VM they made rank 0's sampling slower (docs/benchmarks-noise.md).
func rowMemory(n int) []float32 {
	mem := make([]float32, n)
	_ = populate(mem) // advice: without it the pages map on first use
	return mem
}
