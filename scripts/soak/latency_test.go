package main

import (
	"testing"
	"time"

	"github.com/tpcoord/tpcoord/broadcast/api"
)

func TestMaxWait(t *testing.T) {
	t0 := time.Unix(100, 0)
	for _, tc := range []struct {
		name string
		r    reqRecord
		want float64
	}{
		{"first token longest", reqRecord{TokenMs: []float64{50, 60, 70}}, 50},
		{"a gap longest", reqRecord{TokenMs: []float64{10, 20, 1020, 1030}}, 1000},
		{"tokens of one chunk", reqRecord{TokenMs: []float64{30, 30, 30}}, 30},
		{"no token", reqRecord{Sent: t0, Done: t0.Add(2500 * time.Millisecond)}, 2500},
	} {
		if got := maxWaitMs(&tc.r); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestLatencyStats(t *testing.T) {
	v := make([]float64, 0, 200)
	for i := 200; i >= 1; i-- { // out of order
		v = append(v, float64(i))
	}
	if got, want := latencyStats(v), (latencyStat{N: 200, P50: 100, P99: 198, Max: 200}); got != want {
		t.Errorf("1..200: %+v, want %+v (nearest rank)", got, want)
	}
	if got, want := latencyStats([]float64{-5, 7, 3}), (latencyStat{N: 3, P50: 3, P99: 7, Max: 7}); got != want {
		t.Errorf("three values: %+v, want %+v", got, want)
	}
	if got := latencyStats(nil); got != (latencyStat{}) {
		t.Errorf("none: %+v", got)
	}
}

func TestFaultWindows(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	rs := []recovery{
		// Recovered: to the later of the world (4 s) and a new request (5 s).
		{Fault: faultRecord{Kind: faultFollowerKill, At: at(10), End: at(10.1)}, WorldMs: 4000, NextNewOKMs: 5000},
		// The injection (a freeze) ends after both.
		{Fault: faultRecord{Kind: faultFollowerStop, At: at(20), End: at(22)}, WorldMs: 1000, NextNewOKMs: 500},
		// Never recovered: until the next fault.
		{Fault: faultRecord{Kind: faultRank0Kill, At: at(30), End: at(30)}, WorldMs: -1, NextNewOKMs: 6000},
		// Never recovered, the last: until the end of the load.
		{Fault: faultRecord{Kind: faultNATSRestart, At: at(40), End: at(41)}, WorldMs: 2000, NextNewOKMs: -1},
	}
	ws := faultWindows(rs, at(50))
	want := []faultWindow{{faultFollowerKill, at(10), at(15)}, {faultFollowerStop, at(20), at(22)}, {faultRank0Kill, at(30), at(40)}, {faultNATSRestart, at(40), at(50)}}
	for i, w := range want {
		if ws[i].kind != w.kind || !ws[i].from.Equal(w.from) || !ws[i].to.Equal(w.to) {
			t.Errorf("window %d: %s %v to %v, want %s %v to %v", i, ws[i].kind, ws[i].from, ws[i].to, w.kind, w.from, w.to)
		}
	}
}

func TestAddedLatencies(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	// req is a request sent at s seconds whose tokens came at ms after.
	req := func(path string, s float64, ms ...float64) reqRecord {
		return reqRecord{Path: path, Sent: at(s), Done: at(s + ms[len(ms)-1]/1000), TokenMs: ms, Finish: api.FinishLength}
	}
	rs := []recovery{
		{Fault: faultRecord{Kind: faultRank0Kill, At: at(10), End: at(10)}, WorldMs: 6000, NextNewOKMs: 7000}, // window 10 to 17
		{Fault: faultRecord{Kind: faultNATSRestart, At: at(20), End: at(21)}, WorldMs: 1500, NextNewOKMs: 1400},
	}
	failed := req(pathGo, 9.5, 20)
	failed.Done, failed.Finish, failed.Error = at(12), "", "rank 0 is gone"
	recs := []reqRecord{
		// Clean: the Go client's largest waits 30, 40, 50 (median 40); the
		// gateway's 60 and 80 (median 70).
		req(pathGo, 1, 30, 40), req(pathGo, 2, 40, 50), req(pathGo, 3, 10, 60), req(pathGateway, 4, 60), req(pathGateway, 5, 80, 90),
		// In flight at the rank 0 kill: a gap of 7 s.
		req(pathGo, 9.9, 20, 7020, 7030),
		req(pathGateway, 9.8, 6070, 6080),
		failed,
		// Sent during the kill's window: neither clean nor in flight at it.
		req(pathGo, 12, 3000),
		// In flight at the NATS restart.
		req(pathGateway, 19.9, 1570),
		req(pathGo, 19.95, 20, 40, 1540),
		// After every window: clean.
		req(pathGo, 30, 40),
	}
	a := addedLatencies(recs, rs, at(40))
	if a.BaselineMs[pathGo] != 40 || a.BaselineMs[pathGateway] != 70 || a.Clean[pathGo] != 4 || a.Clean[pathGateway] != 2 {
		t.Fatalf("baselines %v over %v, want go 40 over 4, gateway 70 over 2", a.BaselineMs, a.Clean)
	}
	if len(a.Kinds) != 2 || a.Kinds[0].Kind != faultNATSRestart || a.Kinds[1].Kind != faultRank0Kill {
		t.Fatalf("kinds %+v, want nats-restart then rank0-kill (faultKinds' order)", a.Kinds)
	}
	kill := a.Kinds[1]
	if kill.Faults != 1 || kill.Failed != 1 || kill.All != (latencyStat{N: 2, P50: 6000, P99: 6960, Max: 6960}) {
		t.Errorf("rank 0 kill: %+v", kill)
	}
	if kill.ByPath[pathGo] != (latencyStat{N: 1, P50: 6960, P99: 6960, Max: 6960}) || kill.ByPath[pathGateway].P50 != 6000 {
		t.Errorf("rank 0 kill by path: %+v", kill.ByPath)
	}
	nats := a.Kinds[0]
	if nats.All != (latencyStat{N: 2, P50: 1460, P99: 1500, Max: 1500}) || nats.Failed != 0 {
		t.Errorf("NATS restart: %+v", nats)
	}
}
