package noisepool

import (
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// populate maps the pages of mem writable, without changing its contents,
// in one system call. A partial page at its start, which madvise cannot
// be given, is mapped on its first write. Kernels before 5.14 refuse
// (EINVAL).
func populate(mem []float32) error {
	if len(mem) == 0 {
		return nil
	}
	page := uintptr(os.Getpagesize())
	skip := int((page - uintptr(unsafe.Pointer(&mem[0]))%page) % page / 4)
	if skip >= len(mem) {
		return nil // no whole page
	}
	mem = mem[skip:]
	b := unsafe.Slice((*byte)(unsafe.Pointer(&mem[0])), len(mem)*4)
	return unix.Madvise(b, unix.MADV_POPULATE_WRITE)
}
