//go:build unix

package fanout

import (
	"syscall"
	"time"
)

// selfCPU is the user+system CPU time this process has used so far, all
// threads together; 0 if the kernel does not say.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
