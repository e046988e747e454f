//go:build !agentonly

package main

import (
	"strings"
	"testing"

	"github.com/tpcoord/tpcoord/broadcast/api"
)

func TestPrintStatusNamesStuckPhase(t *testing.T) {
	var b strings.Builder
	printStatus(&b, []api.RankStatus{
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

func TestPrintStatusNoisePool(t *testing.T) {
	var b strings.Builder
	printStatus(&b, []api.RankStatus{
		{Rank: 0, World: 2, State: "running", Step: 9, Digest: "d", Sampler: map[string]uint64{
			"noise_bound_rows": 1, "noise_producers": 1, "noise_rows_taken": 4090, "noise_take_errors": 6,
			"noise_rows_inline": 4, "noise_rows_ready": 64}},
		{Rank: 1, World: 2, State: "running", Step: 9, Digest: "d"},
	})
	want := "rank 0 noise pool: bound rows, 1 producer; 4096 rows taken, 10 made inline (6 of them for want of a free slot), 64 ready\n"
	if !strings.HasSuffix(b.String(), want) || strings.Contains(b.String(), "rank 1 noise") {
		t.Errorf("status:\n%s\nwant it to end with %q", b.String(), want)
	}
}

func TestPrintStatusKV(t *testing.T) {
	var b strings.Builder
	printStatus(&b, []api.RankStatus{
		{Rank: 0, World: 2, State: "running", Step: 9, Digest: "d", KV: &api.KVStatus{BlockSize: 16, Blocks: 400, Used: 100, Preemptions: 3}},
		{Rank: 1, World: 2, State: "running", Step: 9, Digest: "d"},
	})
	want := "rank 0 kv cache: 100 of 400 blocks used (25.0%), 16 tokens a block; 3 preempted this epoch\n"
	if !strings.HasSuffix(b.String(), want) || strings.Contains(b.String(), "rank 1 kv") {
		t.Errorf("status:\n%s\nwant it to end with %q", b.String(), want)
	}
	b.Reset()
	printKV(&b, &api.RankStatus{KV: &api.KVStatus{BlockSize: 16, Blocks: 400, Used: 100, PrefixCacheQueries: 2048, PrefixCacheHits: 512}})
	want = "rank 0 kv cache: 100 of 400 blocks used (25.0%), 16 tokens a block; 0 preempted this epoch; prefix cache: 512 of 2048 tokens hit (25.0%)\n"
	if b.String() != want {
		t.Errorf("status with prefix cache lookups:\n%s\nwant %q", b.String(), want)
	}
}
