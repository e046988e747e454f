//go:build !race

package noisepool

const raceEnabled = false
