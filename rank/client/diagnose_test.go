package client

import (
	"strings"
	"testing"

	"github.com/tpcoord/tpcoord/broadcast/api"
)

func TestDiagnose(t *testing.T) {
	ranks := []api.RankStatus{
		{Rank: 0, World: 5, State: "running", Phase: "await", PhaseMs: 12, Step: 20, Digest: "a", Rows: 1,
			Peers: []api.PeerStatus{{Rank: 1, HeartbeatAgeMs: 40}, {Rank: 2, HeartbeatAgeMs: 2500, Step: 20}, {Rank: 3, HeartbeatAgeMs: 30, Step: 9}, {Rank: 4, HeartbeatAgeMs: 20}}},
		{Rank: 1, World: 5, State: "running", Phase: "forward", PhaseMs: 12000, Step: 20, Digest: "a"},
		{Rank: 2, World: 5, State: "running", Phase: "await", PhaseMs: 3, Step: 20, Digest: "a"},
		{Rank: 4, World: 5, State: "running", Phase: "await", PhaseMs: 3, Step: 20, Digest: "b"},
	}
	want := []string{"", "STUCK? in forward for 12s", "STUCK? no heartbeat for over 1s", "MISSING: no status answer; rank 0 last saw step 9", "DIGEST DIFFERS from rank 0"}
	got := Diagnose(ranks, 1024)
	if len(got) != 5 {
		t.Fatalf("%d ranks laid out, want 5", len(got))
	}
	for i, v := range got {
		if v.Rank != i || v.Note != want[i] {
			t.Errorf("rank %d: note %q, want %q", v.Rank, v.Note, want[i])
		}
	}
	behind := Diagnose([]api.RankStatus{{Rank: 0, World: 2, Step: 20}, {Rank: 1, World: 2, Step: 10}}, 1024)
	if !strings.HasPrefix(behind[1].Note, "BEHIND rank 0 by 10") || behind[1].HeartbeatAgeMs != -1 {
		t.Errorf("behind: %+v", behind[1])
	}
	if n := len(Diagnose([]api.RankStatus{{Rank: 0, World: 1 << 30}}, 8)); n != 8 {
		t.Errorf("a reply claiming a huge world laid out %d ranks, want the bound 8", n)
	}
}

// A row taken for want of a free slot was made inline: it counts in both.
func TestNoiseOf(t *testing.T) {
	if NoiseOf(nil) != nil {
		t.Error("no counters: a pool")
	}
	got := NoiseOf(map[string]uint64{"noise_bound_rows": 1, "noise_producers": 2, "noise_rows_taken": 4090, "noise_take_errors": 6,
		"noise_rows_inline": 4, "noise_rows_ready": 64})
	want := NoisePool{Form: "bound", Producers: 2, Taken: 4096, Inline: 10, NoSlot: 6, Ready: 64}
	if *got != want {
		t.Errorf("%+v, want %+v", *got, want)
	}
	if got := NoiseOf(map[string]uint64{"noise_producers": 1}); got.Form != "exact" {
		t.Errorf("form %q, want exact", got.Form)
	}
}
