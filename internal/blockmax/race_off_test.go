//go:build !race

package blockmax

const raceEnabled = false
