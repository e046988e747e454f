package rankproc

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestCause: what a rank writes, launch reads back on one line; no file,
// no path or no error: nothing.
func TestCause(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rank-1.cause")
	if got := ReadCause(path); got != "" {
		t.Fatalf("no file: %q", got)
	}
	if WriteCause("", errors.New("x")) || WriteCause(path, nil) {
		t.Fatal("written without a path or an error")
	}
	if !WriteCause(path, errors.New("start the executor: worker exited\nhint: look")) {
		t.Fatal("not written")
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("file: %v %v", fi, err)
	}
	if got, want := ReadCause(path), "start the executor: worker exited; hint: look"; got != want {
		t.Fatalf("read %q, want %q", got, want)
	}
}
