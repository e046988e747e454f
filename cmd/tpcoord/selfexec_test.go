//go:build !agentonly

package main

import (
	"bytes"
	"io"
	"os"
	"testing"

	"github.com/spf13/cobra"

	"github.com/tpcoord/tpcoord/cmd/tpcoord/internal/bench/job"
)

// The benches spawn processes from os.Executable() (benchSelf), which
// under go test is this test binary: `bench e2e` and `bench step` start
// launch (which starts its agents the same way), `bench broadcast` its
// publisher, server and followers. They set TPC_RUN_AS_TPCOORD
// (job.RunAsTPCoordEnv) in those processes' environment; this hook, seeing
// it, runs the tpcoord command line and exits before any test starts. An
// init rather than a TestMain so that it cannot clash with a TestMain
// another file may add. Either way the test binary must not re-execute
// itself (reexec).
func init() {
	reexec = false
	if os.Getenv(job.RunAsTPCoordEnv) == "" {
		return
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// execBench runs a bench command with args and returns what it printed to
// stdout; its progress on stderr is discarded.
func execBench(t *testing.T, cmd *cobra.Command, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(io.Discard)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(t.Context())
	return out.String(), err
}
