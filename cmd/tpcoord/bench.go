//go:build !agentonly

package main

import (
	"fmt"
	"os"
)

// The `bench` commands are wiring: flags fill a bench package's Options
// (cmd/tpcoord/internal/bench/...), a validation error exits 2 (exitConfig), and the
// package's Run does the work.

// benchSelf is the tpcoord binary a bench starts its processes from: this
// one. Under go test it is the test binary, which selfexec_test.go turns
// into tpcoord in the processes the bench starts.
func benchSelf() (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("locate own binary: %w", err)
	}
	return self, nil
}

// benchConfigError makes a bench's validation error exit with exitConfig.
func benchConfigError(err error) error {
	if err == nil {
		return nil
	}
	return &exitError{code: exitConfig, err: err}
}
