package job

import (
	"os/exec"
	"slices"
)

// RunAsTPCoordEnv is set in the environment of every process a bench
// starts: launch and its agents, the broadcast publisher, server and
// followers. The tpcoord binary ignores it; a test binary standing in for
// tpcoord (the bench packages are given os.Executable(), which under go
// test is the test binary) runs the tpcoord command line instead of the
// tests when it sees it (cmd/tpcoord/selfexec_test.go).
const RunAsTPCoordEnv = "TPC_RUN_AS_TPCOORD"

// Command runs path (the tpcoord binary, or a wrapper such as taskset that
// runs it) with args and env, plus RunAsTPCoordEnv.
func Command(path string, args, env []string) *exec.Cmd {
	c := exec.Command(path, args...)
	c.Env = append(slices.Clip(env), RunAsTPCoordEnv+"=1")
	return c
}

// Tail is the last n bytes of a process's output s, marked as cut when
// longer, for an error message.
func Tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
