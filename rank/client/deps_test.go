package client

import (
	"os/exec"
	"strings"
	"testing"
)

// Clients import this package to talk to a job; it must not pull the
// agent's telemetry stack (Prometheus, OpenTelemetry) into their binaries.
func TestNoTelemetryDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 5 {
		t.Fatalf("go list -deps listed only %v", deps)
	}
	for _, d := range deps {
		for _, banned := range []string{"github.com/prometheus/", "go.opentelemetry.io/", "github.com/tpcoord/tpcoord/rank\n"} {
			if strings.HasPrefix(d+"\n", banned) {
				t.Errorf("rank/client depends on %s", d)
			}
		}
	}
}
