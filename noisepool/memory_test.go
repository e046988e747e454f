package noisepool

import "testing"

// rowMemory hands out zeroed memory of the asked length.
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
}
