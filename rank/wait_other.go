//go:build !linux

package rank

import "time"

// sleepPrecise falls back to the runtime's timer where nanosleep is not
// wired up.
func sleepPrecise(d time.Duration) { time.Sleep(d) }
