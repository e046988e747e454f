package launch

import "testing"

// Launch shares the cores with its ranks, unless it serves HTTP, when its
// gateway keeps them all.
func TestSelfShare(t *testing.T) {
	for _, tc := range []struct {
		nproc   int
		serving bool
		want    int
	}{{2, false, 3}, {8, false, 9}, {2, true, 1}, {64, true, 1}} {
		if got := SelfShare(tc.nproc, tc.serving); got != tc.want {
			t.Errorf("SelfShare(%d, %v) = %d, want %d", tc.nproc, tc.serving, got, tc.want)
		}
	}
}
