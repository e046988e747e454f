//go:build !linux

package launch

import "syscall"

func ChildProcAttr() *syscall.SysProcAttr { return nil }
