//go:build unix

package secretfile

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestReadFIFO: a FIFO at a key's path is refused at once, not waited on
// for a writer that never comes (the test would hang without O_NONBLOCK).
func TestReadFIFO(t *testing.T) {
	p := filepath.Join(t.TempDir(), "key")
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	_, err := Read(p, 64)
	if err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("Read(FIFO) = %v, want a refusal: not a regular file", err)
	}
}
