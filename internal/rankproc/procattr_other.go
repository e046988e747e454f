//go:build !linux

package rankproc

import "syscall"

// DieWithParent has no parent-death signal to ask for on this platform:
// the child may outlive its parent.
func DieWithParent() *syscall.SysProcAttr { return nil }
