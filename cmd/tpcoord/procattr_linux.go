package main

import "syscall"

// childProcAttr makes the kernel send SIGTERM to a rank if launch dies, so
// no rank outlives it.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
