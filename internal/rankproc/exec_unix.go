//go:build unix

package rankproc

import "syscall"

// execSelf replaces this process with path run with args and env.
func execSelf(path string, args, env []string) error { return syscall.Exec(path, args, env) }
