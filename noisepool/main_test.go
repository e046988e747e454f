package noisepool

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any test leaves a goroutine behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// exhaustive reports whether the 2^32-input sweeps should run
// (TPC_NOISE_EXHAUSTIVE=1; about a minute on two cores).
func exhaustive() bool { return os.Getenv("TPC_NOISE_EXHAUSTIVE") == "1" }
