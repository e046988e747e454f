package main

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tpcoord/tpcoord/broadcast/api"
)

// world4 is a status round of four ranks in one state and epoch, rank 0
// being member r0.
func world4(t time.Time, r0 string, epoch uint32, state string) statusPoll {
	p := statusPoll{T: t}
	for r := range 4 {
		p.Ranks = append(p.Ranks, rankState{Rank: r, State: state, Epoch: epoch, Member: r0})
	}
	return p
}

func TestRecoveries(t *testing.T) {
	t0 := time.Unix(5000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	polls := []statusPoll{
		world4(at(0), "a", 0, "running"),
		world4(at(9), "a", 0, "running"),
		{T: at(11), Ranks: world4(at(11), "a", 0, "reforming").Ranks[:3]},
		world4(at(12), "a", 0, "running"), // stale answer of the old world: not the new one
		world4(at(14), "a", 1, "ready"),
		world4(at(20.25), "a", 1, "running"), // during the flood: too early
		world4(at(21), "a", 1, "running"),    // after the flood, 20 to 20.5
		world4(at(31), "b", 0, "running"),    // rank 0 replaced; the kill at 30 has no later fault
	}
	faults := []faultRecord{
		{Kind: faultFollowerKill, At: at(10)},
		{Kind: faultNATSRestart, At: at(15), Skipped: "not serving"},
		{Kind: faultFlood, At: at(20), End: at(20.5)},
		{Kind: faultRank0Kill, At: at(30)},
		{Kind: faultFollowerStop, At: at(40)},
	}
	recs := []reqRecord{
		{Sent: at(8), Done: at(12.5), Finish: api.FinishLength}, // held across the kill
		{Sent: at(13), Done: at(14.5), Finish: api.FinishStop},
		{Sent: at(10.5), Done: at(11), Error: "unavailable"},
		{Sent: at(19), Done: at(20.25), Finish: api.FinishLength},
	}
	got := recoveries(faults, recs, polls, 4, at(50))
	if len(got) != 4 {
		t.Fatalf("%d recoveries, want 4 (one fault skipped)", len(got))
	}
	want := []struct{ ok, newOK, world float64 }{
		{2500, 4500, 4000}, // the follower kill: world 1 at 14
		{250, -1, 1000},    // the flood: the same world serves at 21
		{-1, -1, 1000},     // rank 0's kill: a new rank 0 at 31
		{-1, -1, -1},       // the freeze: nothing after it
	}
	for i, w := range want {
		r := got[i]
		if r.NextOKMs != w.ok || r.NextNewOKMs != w.newOK || r.WorldMs != w.world {
			t.Errorf("%s: next ok %v, new %v, world %v; want %v, %v, %v", r.Fault.Kind, r.NextOKMs, r.NextNewOKMs, r.WorldMs, w.ok, w.newOK, w.world)
		}
	}
	if got[0].Before != (worldKey{"a", 0}) || got[0].After != (worldKey{"a", 1}) || got[2].After != (worldKey{"b", 0}) {
		t.Errorf("worlds: %+v → %+v, rank 0 kill → %+v", got[0].Before, got[0].After, got[2].After)
	}
	if ws := worldsSeen(polls, 4); len(ws) != 3 || ws[0].Polls != 3 || ws[1].Key.Epoch != 1 || ws[2].Key.Rank0 != "b" {
		t.Errorf("worlds seen: %+v", ws)
	}
}

func TestServingNeedsEveryRankInOrder(t *testing.T) {
	p := world4(time.Unix(0, 0), "a", 2, "running")
	if _, ok := p.serving(4); !ok {
		t.Fatal("four running ranks in one epoch do not serve")
	}
	p.Ranks[3].Epoch = 1
	if _, ok := p.serving(4); ok {
		t.Error("ranks in two epochs serve")
	}
	p = world4(time.Unix(0, 0), "a", 2, "running")
	p.Ranks[1].Rank = 2
	if _, ok := p.serving(4); ok {
		t.Error("a status round without rank 1 serves")
	}
}

func TestSchedule(t *testing.T) {
	s := schedule(10*time.Minute, 30*time.Second, time.Minute, 30*time.Second, faultKinds)
	if len(s) != 17 {
		t.Fatalf("%d faults in 8m30s at 30s apart, want 17", len(s))
	}
	if s[0].At != 30*time.Second || s[0].Kind != faultKinds[0] || s[5].Kind != faultKinds[0] || s[16].Kind != faultKinds[1] {
		t.Errorf("schedule starts %+v, cycles %+v %+v", s[0], s[5], s[16])
	}
	if last := s[len(s)-1].At; last >= 9*time.Minute {
		t.Errorf("the last fault at %v is in the cool-down", last)
	}
	if s := schedule(90*time.Second, 5*time.Second, 10*time.Second, 30*time.Second, faultKinds); len(s) != 2 || s[1].At != 42500*time.Millisecond {
		t.Errorf("90s: %+v", s)
	}
	if s := schedule(10*time.Second, 5*time.Second, 10*time.Second, time.Second, faultKinds); s != nil {
		t.Errorf("no room for faults, got %+v", s)
	}
}

func TestRejectedDiff(t *testing.T) {
	before := []api.RankStatus{
		{Rank: 0, Member: "m0", Rejected: map[string]uint64{"heartbeat": 2}},
		{Rank: 1, Member: "m1", Rejected: map[string]uint64{"step": 5, "duplicate": 1}},
	}
	after := []api.RankStatus{
		{Rank: 0, Member: "m0", Rejected: map[string]uint64{"heartbeat": 2}},
		{Rank: 1, Member: "m1", Rejected: map[string]uint64{"step": 705, "duplicate": 144}},
		{Rank: 2, Member: "m2"},
	}
	got := rejectedDiff(before, after)
	for _, want := range []string{"rank 0: none", "rank 1: duplicate 143, step 700", "rank 2: no status before"} {
		if !strings.Contains(got, want) {
			t.Errorf("%q lacks %q", got, want)
		}
	}
	after[1].Epoch = 1
	if got := rejectedDiff(before, after); !strings.Contains(got, "rank 1: new member or epoch") {
		t.Errorf("a rank in a new epoch: %q", got)
	}
}

func TestErrorsByFault(t *testing.T) {
	t0 := time.Unix(100, 0)
	faults := []faultRecord{
		{Kind: faultFollowerKill, At: t0.Add(10 * time.Second)},
		{Kind: faultNATSRestart, At: t0.Add(20 * time.Second), Skipped: "not serving"},
		{Kind: faultRank0Kill, At: t0.Add(30 * time.Second)},
	}
	recs := []reqRecord{
		{Done: t0.Add(5 * time.Second), Error: "no rank 0 serves job \"soak\""},
		{Done: t0.Add(12 * time.Second), Error: "rank 0: unavailable: rank 0 is waiting for the world to re-form"},
		{Done: t0.Add(25 * time.Second), Error: "rank 0: unavailable: rank 0 is waiting for the world to re-form"},
		{Done: t0.Add(31 * time.Second), Error: "no rank 0 serves job \"soak\""},
		{Done: t0.Add(32 * time.Second), Finish: api.FinishLength},
	}
	got := errorsByFault(recs, faults)
	want := map[string]map[string]int{
		"no responders: no rank 0 subscribed to generate":         {"": 1, faultRank0Kill: 1},
		"unavailable: rank 0 is waiting for the world to re-form": {faultFollowerKill: 2},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("errorsByFault = %v, want %v", got, want)
	}
}
