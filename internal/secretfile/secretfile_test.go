package secretfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func write(t *testing.T, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil { // whatever the umask
		t.Fatal(err)
	}
	return p
}

// TestRead: an owner-only file is read whole; a file open to the group or
// others, one over the limit, a directory and a missing file are refused,
// each naming the path and never the contents.
func TestRead(t *testing.T) {
	const secret = "c2VjcmV0LWtleS1ieXRlcw=="
	for _, mode := range []os.FileMode{0o600, 0o400} {
		got, err := Read(write(t, secret, mode), 64)
		if err != nil || string(got) != secret {
			t.Fatalf("mode %04o: %q, %v", mode, got, err)
		}
	}
	for _, tc := range []struct {
		name    string
		content string
		mode    os.FileMode
		want    string
	}{
		{"group-readable", secret, 0o640, "mode 0640"},
		{"world-readable", secret, 0o604, "chmod 600"},
		{"group-writable", secret, 0o620, "open to its group or others"},
		{"over the limit", strings.Repeat("A", 65), 0o600, "larger than 64 bytes"},
	} {
		p := write(t, tc.content, tc.mode)
		_, err := Read(p, 64)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: err = %v, want it to say %q and name %s", tc.name, err, tc.want, p)
		}
		if err != nil && strings.Contains(err.Error(), secret) {
			t.Errorf("%s: the error shows the secret: %v", tc.name, err)
		}
	}
	if got, err := Read(write(t, strings.Repeat("A", 64), 0o600), 64); err != nil || len(got) != 64 {
		t.Errorf("exactly the limit: %d bytes, %v", len(got), err)
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(dir, 64); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a directory: err = %v", err)
	}
	missing := filepath.Join(dir, "missing")
	if _, err := Read(missing, 64); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "head -c 32 /dev/urandom | base64 > "+missing) {
		t.Errorf("a missing file: err = %v, want it to say how to make one", err)
	}
}
