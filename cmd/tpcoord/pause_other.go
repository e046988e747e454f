//go:build !linux

package main

import "time"

// pause sleeps for d (coarser than the Linux version).
func pause(d time.Duration) { time.Sleep(d) }
