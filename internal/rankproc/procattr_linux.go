package rankproc

import "syscall"

// DieWithParent makes the kernel send SIGTERM to a child if its parent
// dies, so that no rank outlives launch (nor a bench's process its bench).
func DieWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
