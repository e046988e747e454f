package launch

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func touch(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("#!/usr/bin/env python3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestTorchWorkerScriptOrder: the first place that holds the script is
// taken; a directory at a place is passed over.
func TestTorchWorkerScriptOrder(t *testing.T) {
	for first := 0; first < 4; first++ { // the fifth, /usr/share, is the host's
		root := t.TempDir()
		self := filepath.Join(root, "prefix", "bin", "tpcoord")
		places := TorchWorkerPlaces(self, filepath.Join(root, "work"))
		for _, p := range places[first:4] {
			touch(t, p)
		}
		if first > 0 {
			if err := os.MkdirAll(places[first-1], 0o755); err != nil {
				t.Fatal(err)
			}
		}
		got, err := TorchWorkerScript(self, filepath.Join(root, "work"))
		if err != nil || got != filepath.Clean(places[first]) {
			t.Errorf("scripts from place %d on: %q, %v; want %q", first, got, err, places[first])
		}
	}
	places := TorchWorkerPlaces("/opt/tp/bin/tpcoord", "/work")
	want := []string{"/opt/tp/share/tpcoord/torch-worker/worker.py", "/opt/tp/bin/examples/torch-worker/worker.py",
		"/opt/tp/examples/torch-worker/worker.py", "/work/examples/torch-worker/worker.py", "/usr/share/tpcoord/torch-worker/worker.py"}
	for i := range want {
		if filepath.Clean(places[i]) != want[i] {
			t.Errorf("place %d: %s, want %s", i, places[i], want[i])
		}
	}
}

func TestTorchWorkerScriptNone(t *testing.T) {
	if _, err := os.Stat("/usr/share/tpcoord/torch-worker/worker.py"); err == nil {
		t.Skip("a package installed the worker on this host")
	}
	root := t.TempDir()
	_, err := TorchWorkerScript(filepath.Join(root, "bin", "tpcoord"), root)
	if err == nil || !strings.Contains(err.Error(), filepath.Join(root, "examples", "torch-worker", "worker.py")) {
		t.Errorf("no script anywhere: %v", err)
	}
}
