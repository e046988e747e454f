package noisepool

import (
	"errors"
	"os"
	"runtime"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// populate maps every whole page it is given, whatever the slice's
// alignment, and leaves the contents alone.
func TestPopulateMapsPagesAndKeepsContents(t *testing.T) {
	if err := populate(make([]float32, 4096)); errors.Is(err, unix.EINVAL) {
		t.Skip("this kernel has no MADV_POPULATE_WRITE (Linux < 5.14)")
	}
	mem := make([]float32, 1<<20)
	for i := range mem {
		mem[i] = float32(i)
	}
	for _, off := range []int{0, 1, 7, 1023, len(mem) - 1} {
		if err := populate(mem[off:]); err != nil {
			t.Fatalf("populate(mem[%d:]): %v", off, err)
		}
	}
	if err := populate(nil); err != nil {
		t.Fatalf("populate(nil): %v", err)
	}
	for i, v := range mem {
		if v != float32(i) {
			t.Fatalf("mem[%d] = %v after populate", i, v)
		}
	}
}

// Populated memory takes no page fault when written; memory that was not
// takes one a page.
func TestPopulateSparesPageFaults(t *testing.T) {
	if testing.Short() {
		// scripts/test.sh runs this package's -short tests for s390x under
		// qemu-user, which ignores madvise: the counts need a real kernel.
		t.Skip("page-fault counts need a real kernel (qemu-user ignores madvise)")
	}
	if err := populate(make([]float32, 4096)); errors.Is(err, unix.EINVAL) {
		t.Skip("this kernel has no MADV_POPULATE_WRITE (Linux < 5.14)")
	}
	runtime.LockOSThread() // the fault counts are the thread's
	defer runtime.UnlockOSThread()
	const size = 16 << 20
	pages := size / os.Getpagesize()
	for _, pop := range []bool{true, false} {
		b, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
		if err != nil {
			t.Fatal(err)
		}
		// Small pages, whatever the host's transparent huge page setting,
		// so that unmapped memory faults once a page.
		if err := unix.Madvise(b, unix.MADV_NOHUGEPAGE); err != nil {
			t.Fatal(err)
		}
		mem := unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), size/4)
		if pop {
			if err := populate(mem); err != nil {
				t.Fatal(err)
			}
		}
		before := minorFaults(t)
		for i := 0; i < len(mem); i += 1024 {
			mem[i] = 1
		}
		n := minorFaults(t) - before
		if err := unix.Munmap(b); err != nil {
			t.Fatal(err)
		}
		switch {
		case pop && n > int64(pages)/16:
			t.Fatalf("%d page faults writing %d populated pages", n, pages)
		case !pop && n < int64(pages)/2:
			t.Fatalf("only %d page faults writing %d unmapped pages: the test cannot tell", n, pages)
		}
	}
}

func minorFaults(t *testing.T) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_THREAD, &ru); err != nil {
		t.Fatal(err)
	}
	return ru.Minflt
}
