//go:build !unix

package main

import "time"

// selfCPU is not measured on this platform.
func selfCPU() time.Duration { return 0 }
