package launch

import "syscall"

// ChildProcAttr makes the kernel send SIGTERM to a rank if launch dies, so
// no rank outlives it.
func ChildProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
