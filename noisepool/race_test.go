//go:build race

package noisepool

const raceEnabled = true
