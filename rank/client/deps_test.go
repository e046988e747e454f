package client

import (
	"os/exec"
	"strings"
	"testing"
)

// Clients import this package to talk to a job; it must pull neither the
// agent's telemetry stack (Prometheus, OpenTelemetry) nor the decode loop,
// the sampler or the noise pool into their binaries. (depguard holds the
// direct imports; this holds the whole graph.)
func TestLightDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 5 {
		t.Fatalf("go list -deps listed only %v", deps)
	}
	const mod = "github.com/tpcoord/tpcoord/"
	banned := []string{mod + "rank", mod + "rank/core", mod + "rank/worker", mod + "sampler", mod + "noisepool"}
	for _, d := range deps {
		for _, prefix := range []string{"github.com/prometheus/", "go.opentelemetry.io/"} {
			if strings.HasPrefix(d, prefix) {
				t.Errorf("rank/client depends on %s", d)
			}
		}
		for _, b := range banned {
			if d == b {
				t.Errorf("rank/client depends on %s", d)
			}
		}
	}
}
