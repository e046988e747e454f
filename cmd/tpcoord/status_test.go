package main

import (
	"strings"
	"testing"

	"github.com/tpcoord/tpcoord/rank/client"
)

func TestPrintStatusNamesStuckPhase(t *testing.T) {
	var b strings.Builder
	printStatus(&b, []client.RankStatus{
		{Rank: 0, World: 2, State: "running", Phase: "await", PhaseMs: 12.4, Step: 9, Digest: "d"},
		{Rank: 1, World: 2, State: "running", Phase: "forward", PhaseMs: 12000, Step: 9, Digest: "d"},
	})
	lines := strings.Split(b.String(), "\n")
	if !strings.Contains(lines[0], "PHASE") || !strings.Contains(lines[1], "await 12ms") {
		t.Errorf("status:\n%s", b.String())
	}
	if !strings.Contains(lines[2], "forward 12s") || !strings.Contains(lines[2], "STUCK? in forward for 12s") {
		t.Errorf("rank 1 line %q, want its phase and a STUCK note", lines[2])
	}
}
