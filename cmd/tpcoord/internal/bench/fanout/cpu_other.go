//go:build !unix

package fanout

import "time"

// selfCPU is not measured on this platform.
func selfCPU() time.Duration { return 0 }
