//go:build !linux

package rank

import "syscall"

func workerProcAttr() *syscall.SysProcAttr { return nil }
