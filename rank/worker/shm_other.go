//go:build !unix

package worker

import "errors"

type shmRegion struct {
	path string
	mem  []byte
}

var errNoShm = errors.New("the worker executor needs a Unix host (mmap)")

func createShm(dir, pattern string, size int) (*shmRegion, error) { return nil, errNoShm }
func openShm(path string, size int) (*shmRegion, error)           { return nil, errNoShm }
func (s *shmRegion) unlink() error                                { return errNoShm }
func (s *shmRegion) close() error                                 { return nil }
func (s *shmRegion) float32s(n int) []float32                     { return nil }
func (s *shmRegion) uint16s(n int) []uint16                       { return nil }
