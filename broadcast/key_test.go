package broadcast

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestNewKey(t *testing.T) {
	a, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	if len(a) != KeySize || len(b) != KeySize || bytes.Equal(a, b) {
		t.Fatalf("two new keys: %d and %d bytes, equal %v", len(a), len(b), bytes.Equal(a, b))
	}
}

// TestKeyNeverPrinted: whatever the verb or the logger, a key shows as a
// placeholder, never its bytes.
func TestKeyNeverPrinted(t *testing.T) {
	k := fixedKey(0x41) // "ABCD...": its bytes would be readable
	secrets := []string{string(k), fmt.Sprintf("%x", []byte(k)), base64.StdEncoding.EncodeToString(k), "65 66 67"}
	var out strings.Builder
	for _, verb := range []string{"%v", "%s", "%x", "%X", "%q", "%d", "%#v", "%+v"} {
		fmt.Fprintf(&out, verb+"\n", k)
		fmt.Fprintf(&out, verb+"\n", struct{ K Key }{k})
	}
	slog.New(slog.NewJSONHandler(&out, nil)).Info("x", "key", k)
	slog.New(slog.NewTextHandler(&out, nil)).Info("x", "key", k)
	for _, s := range secrets {
		if strings.Contains(out.String(), s) {
			t.Fatalf("the key's bytes (%q) were printed:\n%s", s, out.String())
		}
	}
	if !strings.Contains(out.String(), "[redacted]") || Key(nil).String() != "none" {
		t.Fatalf("no placeholder:\n%s", out.String())
	}
}

func writeFile(t *testing.T, name, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil { // whatever the umask
		t.Fatal(err)
	}
	return p
}

// TestReadKeyFile: a 0600 (or 0400) file with the base64 of 32 bytes is
// read; a file open to the group or others, a key of another length,
// text that is not base64, a directory and a missing file are refused,
// each naming the path and never the key.
func TestReadKeyFile(t *testing.T) {
	want := fixedKey(7)
	text := base64.StdEncoding.EncodeToString(want) + "\n"
	for _, mode := range []os.FileMode{0o600, 0o400} {
		got, err := ReadKeyFile(writeFile(t, "job.key", text, mode))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("mode %04o: %v", mode, err)
		}
	}
	short := base64.StdEncoding.EncodeToString(want[:16])
	for _, tc := range []struct {
		name, content string
		mode          os.FileMode
		want          string
	}{
		{"group-readable", text, 0o640, "chmod 600"},
		{"world-readable", text, 0o644, "mode 0644"},
		{"group-writable", text, 0o620, "chmod 600"},
		{"16 bytes", short, 0o600, "holds 16 bytes, want 32"},
		{"not base64", "not a key!", 0o600, "not base64"},
		{"empty", "", 0o600, "holds 0 bytes"},
		{"huge", strings.Repeat("A", 10000), 0o600, "larger than"},
	} {
		p := writeFile(t, "job.key", tc.content, tc.mode)
		_, err := ReadKeyFile(p)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: err = %v, want it to say %q and name %s", tc.name, err, tc.want, p)
		}
		if err != nil && strings.Contains(err.Error(), strings.TrimSpace(text)) {
			t.Errorf("%s: the error shows the key: %v", tc.name, err)
		}
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadKeyFile(dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a directory: err = %v", err)
	}
	if _, err := ReadKeyFile(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "head -c 32") {
		t.Errorf("a missing file: err = %v, want it to say how to make one", err)
	}
}

func TestWriteKeyFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "job.key")
	k := fixedKey(9)
	if err := WriteKeyFile(p, k); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("written key file: %v, %v; want mode 0600", fi.Mode(), err)
	}
	if got, err := ReadKeyFile(p); err != nil || !bytes.Equal(got, k) {
		t.Fatalf("read back: %v", err)
	}
	if err := WriteKeyFile(p, k); !os.IsExist(err) {
		t.Fatalf("overwriting: err = %v, want it to exist already", err)
	}
}
