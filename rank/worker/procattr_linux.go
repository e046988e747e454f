package worker

import "syscall"

// workerProcAttr puts the worker in its own process group (a terminal's
// Ctrl-C reaches the agent, which shuts the worker down in order) and has
// the kernel kill it if the agent dies without doing so.
func workerProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
