package noisepool

import "os"

// rowMemory returns n zeroed float32s for a pool's rows, every page of
// them already mapped. Fresh memory is mapped on its first write, a page
// fault per page: 12,544 of them for the default pool's 51 MB. When rank
// 0's first steps filled slots never used before, each row cost its
// producer about a millisecond of faults (11 µs each on a VM) instead of
// 45 µs, the producers fell behind and those steps made rows inline.
// rowMemory maps the pages when the pool is made: on Linux with one
// madvise(MADV_POPULATE_WRITE) call (12 ms for 51 MB on that VM), else,
// or if the kernel refuses it (before Linux 5.14), by writing a zero into
// each page (135 ms there).
//
// Transparent huge pages (MADV_HUGEPAGE) were measured too and not kept:
// on that VM they made rank 0's sampling slower (docs/benchmarks-noise.md).
func rowMemory(n int) []float32 {
	mem := make([]float32, n)
	if !populate(mem) {
		touchPages(mem)
	}
	return mem
}

// touchPages writes one zero into each page of mem, which maps it.
func touchPages(mem []float32) {
	step := max(os.Getpagesize()/4, 1)
	for i := 0; i < len(mem); i += step {
		mem[i] = 0
	}
}
