//go:build race

package blockmax

const raceEnabled = true
