package main

import (
	"syscall"
	"time"
)

// pause sleeps for d with nanosleep: time.Sleep rounds short sleeps up to
// the netpoller's millisecond resolution, which would turn a 200 µs
// publishing interval into bursts.
func pause(d time.Duration) {
	ts := syscall.NsecToTimespec(d.Nanoseconds())
	_ = syscall.Nanosleep(&ts, nil) // EINTR: the caller loops
}
