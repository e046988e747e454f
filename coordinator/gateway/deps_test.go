package gateway

import (
	"os/exec"
	"strings"
	"testing"
)

// The gateway is stateless and runs on any host of the bus: it must not
// link the decode loop, the sampler, the noise pool or the bench harness.
// (depguard holds the direct imports; this holds the whole graph.)
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
	for _, d := range deps {
		switch {
		case d == mod+"rank", d == mod+"sampler", d == mod+"noisepool",
			strings.HasPrefix(d, mod+"rank/core"), strings.HasPrefix(d, mod+"rank/worker"), strings.HasPrefix(d, mod+"cmd/"):
			t.Errorf("the gateway depends on %s", d)
		}
	}
}
