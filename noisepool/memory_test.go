package noisepool

import "testing"

// rowMemory hands out zeroed memory of the asked length; populate and
// touchPages take any slice and leave its contents alone.
func TestRowMemory(t *testing.T) {
	for _, n := range []int{0, 1, 1023, 1024, 1025, 3 << 20} {
		mem := rowMemory(n)
		if len(mem) != n {
			t.Fatalf("rowMemory(%d) has %d values", n, len(mem))
		}
		for i, v := range mem {
			if v != 0 {
				t.Fatalf("rowMemory(%d)[%d] = %v", n, i, v)
			}
		}
	}
	mem := make([]float32, 1<<20)
	for i := range mem {
		mem[i] = float32(i)
	}
	for _, off := range []int{0, 1, 7, 1023} {
		populate(mem[off:])
	}
	populate(nil)
	for i, v := range mem {
		if v != float32(i) {
			t.Fatalf("mem[%d] = %v after populate", i, v)
		}
	}
	touchPages(mem[3:5]) // shorter than a page
	touchPages(nil)
}
