package noisepool

import (
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// populate maps the pages of mem writable, without changing its contents,
// in one system call; it reports whether the kernel did. The partial page
// at its start, if any, is left to touchPages' caller: madvise wants a
// page-aligned start, and the first write maps that one page.
func populate(mem []float32) bool {
	if len(mem) == 0 {
		return true
	}
	page := uintptr(os.Getpagesize())
	skip := int((page - uintptr(unsafe.Pointer(&mem[0]))%page) % page / 4)
	if skip >= len(mem) {
		return false
	}
	mem = mem[skip:]
	b := unsafe.Slice((*byte)(unsafe.Pointer(&mem[0])), len(mem)*4)
	return unix.Madvise(b, unix.MADV_POPULATE_WRITE) == nil
}
