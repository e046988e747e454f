//go:build !linux

package noisepool

// populate reports that this system has no way to map pages in one call.
func populate([]float32) bool { return false }
