package agent

import (
	"log/slog"
	"strings"
	"testing"
)

// TestStartLinesShort: an agent's start is one info line with the
// essentials (version, world size, executor), short enough for a
// terminal, and one debug line with the addresses and key files.
func TestStartLinesShort(t *testing.T) {
	var logs lockedBuffer
	j := newJob(t, 2, nil)
	j.log = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ms := j.startWorld()
	j.stopAll()
	for _, m := range ms {
		if err := m.wait(t); err != nil {
			t.Errorf("rank %d: %v", m.rank, err)
		}
	}
	var starts, configs []string
	for _, line := range strings.Split(logs.String(), "\n") {
		switch {
		case strings.Contains(line, `msg="agent starting"`):
			starts = append(starts, line)
		case strings.Contains(line, `msg="agent configuration"`):
			configs = append(configs, line)
		}
	}
	if len(starts) != 2 || len(configs) != 2 {
		t.Fatalf("%d start and %d configuration lines from 2 agents, want 2 of each:\n%s", len(starts), len(configs), logs.String())
	}
	for _, l := range starts {
		// slog's time=... and level=INFO take 45 of them, the job and
		// ranks' attributes 35 (it was 260 before).
		if !strings.Contains(l, "level=INFO") || !strings.Contains(l, "world_size=2") || !strings.Contains(l, "executor=synthetic") || len(l) > 140 {
			t.Errorf("start line (%d characters): %s", len(l), l)
		}
		for _, moved := range []string{"bind=", "join=", "job_key_file=", "gossip_key_file="} {
			if strings.Contains(l, moved) {
				t.Errorf("start line holds %s: %s", moved, l)
			}
		}
	}
	for _, l := range configs {
		if !strings.Contains(l, "level=DEBUG") || !strings.Contains(l, "bind=") || !strings.Contains(l, "gossip_keys=") {
			t.Errorf("configuration line: %s", l)
		}
	}
}
