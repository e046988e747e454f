//go:build !purego

package blockmax

import "testing"

// TestVXEListed: the s390x build runs the vector kernel, so the
// equivalence tests check it. Go's own builtin max on float32 compiles to
// WFMAXSB, an instruction of the same facility, so a machine (or emulator)
// without it cannot run these tests at all; a CPU report without it would
// leave the vector kernel untested, silently.
func TestVXEListed(t *testing.T) {
	if Best != &VXE {
		t.Fatalf("Best is %s: the CPU does not report the vector-enhancements facility, so the vxe kernel is not tested", Best.Name)
	}
}
