//go:build unix

package worker

import (
	"fmt"
	"os"
	"syscall"
	"unsafe"
)

// shmRegion is a file mapped MAP_SHARED: the agent creates it and maps it
// read-only; the worker opens it by path and maps it read-write.
type shmRegion struct {
	path string
	mem  []byte
}

// createShm creates a new file of size bytes in dir (mode 0600, a name no
// other process has) and maps it read-only.
func createShm(dir, pattern string, size int) (*shmRegion, error) {
	f, err := os.CreateTemp(dir, pattern)
	if err != nil {
		return nil, fmt.Errorf("create shared-memory file: %w", err)
	}
	defer f.Close()
	s := &shmRegion{path: f.Name()}
	if err := f.Truncate(int64(size)); err != nil {
		_ = os.Remove(s.path)
		return nil, fmt.Errorf("size shared-memory file %s to %d bytes: %w", s.path, size, err)
	}
	if s.mem, err = syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ, syscall.MAP_SHARED); err != nil {
		_ = os.Remove(s.path)
		return nil, fmt.Errorf("mmap %s: %w", s.path, err)
	}
	return s, nil
}

// openShm maps an existing file of at least size bytes read-write.
func openShm(path string, size int) (*shmRegion, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Size() < int64(size) {
		return nil, fmt.Errorf("%s has %d bytes, HELLO says %d", path, fi.Size(), size)
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap %s: %w", path, err)
	}
	return &shmRegion{path: path, mem: mem}, nil
}

func (s *shmRegion) unlink() error { return os.Remove(s.path) }

func (s *shmRegion) close() error {
	if s.mem == nil {
		return nil
	}
	err := syscall.Munmap(s.mem)
	s.mem = nil
	return err
}

// float32s views the first n elements of the mapping as native-order
// float32 (mmap returns page-aligned memory).
func (s *shmRegion) float32s(n int) []float32 {
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(s.mem))), n)
}

// uint16s views the first n elements of the mapping as native-order uint16.
func (s *shmRegion) uint16s(n int) []uint16 {
	return unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(s.mem))), n)
}
