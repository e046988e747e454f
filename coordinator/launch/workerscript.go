package launch

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// TorchWorker is the PyTorch model worker's script: where packages install
// it under their share directory (scripts/package.sh), and where it is in
// a checkout of the repository.
const (
	TorchWorkerShared   = "tpcoord/torch-worker/worker.py"
	TorchWorkerCheckout = "examples/torch-worker/worker.py"
)

// TorchWorkerPlaces are the places TorchWorkerScript looks, in order, for
// the binary self run from the directory cwd:
//
//  1. beside the binary as a package installs it: BIN/../share/tpcoord/...
//     (/usr/bin/tpcoord: /usr/share/tpcoord/torch-worker/worker.py);
//  2. a checkout holding the binary: BIN/examples/... and BIN/../examples/...
//     (go build -o . or -o bin/ in the repository);
//  3. a checkout at the working directory: ./examples/... (go run
//     ./cmd/tpcoord from the repository's root);
//  4. the package's place: /usr/share/tpcoord/torch-worker/worker.py.
func TorchWorkerPlaces(self, cwd string) []string {
	bin := filepath.Dir(self)
	return []string{
		filepath.Join(bin, "..", "share", TorchWorkerShared),
		filepath.Join(bin, TorchWorkerCheckout),
		filepath.Join(bin, "..", TorchWorkerCheckout),
		filepath.Join(cwd, TorchWorkerCheckout),
		filepath.Join("/usr/share", TorchWorkerShared),
	}
}

// TorchWorkerScript is the first of TorchWorkerPlaces(self, cwd) that is
// a regular file, absolute and cleaned; the error lists the places tried.
func TorchWorkerScript(self, cwd string) (string, error) {
	places := TorchWorkerPlaces(self, cwd)
	for _, p := range places {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return filepath.Abs(p)
		}
	}
	return "", fmt.Errorf("the PyTorch worker's script is in none of %s", strings.Join(places, ", "))
}
