// Package secretfile reads small secrets (keys) from files only their
// owner may read: the one place that rule and its error messages live, for
// every key file tpcoord reads.
package secretfile

import (
	"fmt"
	"io"
	"os"
	"syscall"
)

// MakeHint says how to make a key file at path; errors about a missing
// file end with it.
func MakeHint(path string) string {
	return fmt.Sprintf("make one with: head -c 32 /dev/urandom | base64 > %s; chmod 600 %s", path, path)
}

// Read returns the contents of path, a regular file of at most limit bytes
// that only its owner may read or write: a file open to the group or
// others is refused, since anyone who can read a key can use it. Errors
// name the path, never the contents.
func Read(path string, limit int) ([]byte, error) {
	// O_NONBLOCK: opening a FIFO for reading would otherwise wait for a
	// writer, forever; opened at once, it is refused as not regular. It
	// does not change how a regular file reads.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("%w (%s)", err, MakeHint(path))
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("%s is open to its group or others (mode %04o): only its owner may read it; chmod 600 %s", path, perm, path)
	}
	text, err := io.ReadAll(io.LimitReader(f, int64(limit)+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(text) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes: not a key file", path, limit)
	}
	return text, nil
}
