package fanout

import (
	"context"
	_ "embed" // the gloo case's Python process
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// glooScript is the program of the gloo case's processes: run with a
// Python that has PyTorch, it is the publisher (rank 0) or a follower of a
// torch.distributed gloo process group and speaks the protocol of
// RunPublisher and RunFollower. It is embedded so that an installed
// tpcoord needs no source tree; Run writes it to a temporary directory.
//
//go:embed gloo_broadcast.py
var glooScript []byte

// DefaultPythons are the Pythons tried for the gloo transport, in order:
// Debian's python3-torch installs into /usr/bin/python3.
var DefaultPythons = []string{"/usr/bin/python3", "python3"}

// torchCheck prints "gloo True" under a Python whose torch.distributed has
// the gloo backend.
const torchCheck = "import torch.distributed as d; print('gloo', d.is_available() and d.is_gloo_available())"

// pythonCheckTimeout bounds one candidate's check: importing torch takes
// seconds on a busy host.
const pythonCheckTimeout = 60 * time.Second

// TorchPython returns the first of candidates whose torch.distributed has
// gloo, or an error saying what each one gave.
func TorchPython(ctx context.Context, candidates []string) (string, error) {
	var why []string
	for _, py := range candidates {
		cctx, cancel := context.WithTimeout(ctx, pythonCheckTimeout)
		out, err := exec.CommandContext(cctx, py, "-c", torchCheck).CombinedOutput()
		cancel()
		switch {
		case err == nil && strings.TrimSpace(string(out)) == "gloo True":
			return py, nil
		case err == nil:
			why = append(why, fmt.Sprintf("%s: no gloo backend (%q)", py, strings.TrimSpace(string(out))))
		default:
			why = append(why, fmt.Sprintf("%s: %v %s", py, err, lastLine(string(out))))
		}
	}
	return "", fmt.Errorf("no Python with torch.distributed and gloo: %s", strings.Join(why, "; "))
}

// lastLine is the last non-empty line of s: a Python traceback's error.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// ResolveGloo finds the Python for the gloo transport when o has it. With
// o.Python set only that one is tried. When none has torch, an explicit
// request (the caller's explicit, or o.Python) is an error naming the
// flag; otherwise gloo is dropped from o.Transports and progress says so.
func (o *Options) ResolveGloo(ctx context.Context, explicit bool, candidates []string, progress io.Writer) error {
	if !o.has("gloo") {
		return nil
	}
	flag := "--transports"
	if o.Python != "" {
		candidates, explicit, flag = []string{o.Python}, true, "--python"
	}
	py, err := TorchPython(ctx, candidates)
	switch {
	case err == nil:
		o.Python = py
		return nil
	case explicit:
		return fmt.Errorf("%s: the gloo transport needs PyTorch (scripts/deps.sh installs python3-torch): %w", flag, err)
	}
	o.Transports = slices.DeleteFunc(slices.Clone(o.Transports), func(t string) bool { return t == "gloo" })
	fmt.Fprintf(progress, "bench broadcast: gloo transport skipped: %v (scripts/deps.sh installs python3-torch)\n", err)
	return nil
}

// writeGloo writes the gloo processes' program to a new 0700 directory,
// which also holds each case's process-group store, and returns the
// directory for the caller to remove.
func (o *Options) writeGloo() (string, error) {
	if o.Python == "" {
		return "", errors.New("options: Python, the Python with PyTorch the gloo transport runs, is not set (ResolveGloo)")
	}
	dir, err := os.MkdirTemp("", "tpcoord-bench-gloo-")
	if err != nil {
		return "", err
	}
	o.glooDir = dir
	if err := os.WriteFile(filepath.Join(dir, "gloo_broadcast.py"), glooScript, 0o600); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

// glooPublisher is the command line of the gloo case's publisher, rank 0:
// it prints the process group's init URL, a file store of the case's own,
// as its address.
func (c *fanoutCase) glooPublisher() (string, []string) {
	store := "file://" + filepath.Join(c.o.glooDir, "store-"+c.subject)
	return c.o.Python, append(c.glooArgs("publisher", 0, store),
		"--payload", strconv.Itoa(c.o.Payload), "--interval-ns", strconv.FormatInt(c.o.Interval.Nanoseconds(), 10))
}

// glooFollower is the command line of follower id (rank id+1).
func (c *fanoutCase) glooFollower(id int, addr string) (string, []string) {
	return c.o.Python, append(c.glooArgs("follower", id+1, addr), "--payload", strconv.Itoa(c.o.Payload))
}

func (c *fanoutCase) glooArgs(role string, rank int, addr string) []string {
	return []string{filepath.Join(c.o.glooDir, "gloo_broadcast.py"), role, "--world", strconv.Itoa(c.n + 1),
		"--rank", strconv.Itoa(rank), "--addr", addr, "--messages", strconv.Itoa(c.o.Messages),
		"--deadline-s", strconv.FormatFloat(c.life().Seconds(), 'f', 0, 64)}
}
