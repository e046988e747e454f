package rank

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tpcoord/tpcoord/broadcast/api"
)

// recordSteps records steps first..last, each with await 1ms, forward
// 2ms and sample 3ms, starting at t0 + 10ms per step.
func recordSteps(f *FlightRecorder, t0 time.Time, first, last uint64) {
	for k := first; k <= last; k++ {
		at := t0.Add(time.Duration(k) * 10 * time.Millisecond)
		f.enter(PhaseAwait, at)
		f.enter(PhaseForward, at.Add(time.Millisecond))
		f.enter(PhaseSample, at.Add(3*time.Millisecond))
		f.stepDone(k, int(k), at.Add(6*time.Millisecond))
	}
}

func TestFlightRecorderRingWraps(t *testing.T) {
	f := NewFlightRecorder(4)
	t0 := time.Unix(1700000000, 0)
	recordSteps(f, t0, 1, 6)
	s := f.Snapshot(0, t0.Add(time.Second))
	if s.Recorded != 6 || len(s.Steps) != 4 {
		t.Fatalf("recorded %d, kept %d; want 6, 4", s.Recorded, len(s.Steps))
	}
	for i, st := range s.Steps {
		k := uint64(3 + i)
		want := api.StepTiming{Step: k, Start: t0.Add(time.Duration(k) * 10 * time.Millisecond), Rows: int(k), AwaitMs: 1, ForwardMs: 2, SampleMs: 3, TotalMs: 6}
		if !st.Start.Equal(want.Start) {
			t.Errorf("step %d: start %v, want %v", k, st.Start, want.Start)
		}
		st.Start = want.Start
		if st != want {
			t.Errorf("entry %d: %+v, want %+v", i, st, want)
		}
	}
	if last := f.Snapshot(2, t0); len(last.Steps) != 2 || last.Steps[0].Step != 5 || last.Steps[1].Step != 6 {
		t.Errorf("Snapshot(2) = %+v, want steps 5, 6", last.Steps)
	}
}

func TestFlightRecorderCurrentPhase(t *testing.T) {
	f := NewFlightRecorder(8)
	t0 := time.Unix(1700000000, 0)
	f.enter(PhaseAwait, t0)
	f.enter(PhaseForward, t0.Add(time.Millisecond))
	// Entering the phase it is in keeps the phase's start.
	f.enter(PhaseForward, t0.Add(time.Second))
	s := f.Snapshot(0, t0.Add(2*time.Second))
	if s.Phase != PhaseForward || s.InPhase != 2*time.Second-time.Millisecond {
		t.Errorf("phase %v for %v, want forward for 1.999s", s.Phase, s.InPhase)
	}
	var st api.RankStatus
	f.fillStatus(&st, t0.Add(2*time.Second))
	if st.Phase != "forward" || st.PhaseMs != 1999 {
		t.Errorf("status phase %q for %vms, want forward for 1999ms", st.Phase, st.PhaseMs)
	}
	// A nil recorder records nothing and does not panic.
	var nilf *FlightRecorder
	nilf.enter(PhaseAwait, t0)
	nilf.stepDone(1, 1, t0)
	nilf.fillStatus(&st, t0)
}

func TestFlightRecorderDump(t *testing.T) {
	f := NewFlightRecorder(3)
	t0 := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	recordSteps(f, t0, 1, 5)
	f.enter(PhaseAwait, t0.Add(time.Second))
	f.enter(PhaseForward, t0.Add(time.Second+time.Millisecond))
	var b strings.Builder
	if err := f.Dump(&b, "job j rank 1", t0.Add(3*time.Second)); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	if len(lines) != 2+3 {
		t.Fatalf("dump has %d lines, want header, column names and 3 steps:\n%s", len(lines), b.String())
	}
	if want := "flight recorder job j rank 1: phase forward for 1.999s; last 3 of 5 steps (ms):"; lines[0] != want {
		t.Errorf("header %q, want %q", lines[0], want)
	}
	if f := strings.Fields(lines[1]); strings.Join(f, " ") != "step start rows await publish forward sample reply total" {
		t.Errorf("column line %q", lines[1])
	}
	if f := strings.Fields(lines[2]); strings.Join(f, " ") != "3 2025-01-02T03:04:05.030000 3 1.000 0.000 2.000 3.000 0.000 6.000" {
		t.Errorf("first step line %q", lines[2])
	}
	if !strings.HasPrefix(strings.TrimSpace(lines[4]), "5 ") {
		t.Errorf("last step line %q, want step 5", lines[4])
	}
}

// TestFlightRecorderNoAllocs: the decode loop's hooks do not allocate.
func TestFlightRecorderNoAllocs(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	f := NewFlightRecorder(16)
	f.metrics = m
	now := time.Now()
	k := uint64(0)
	allocs := testing.AllocsPerRun(1000, func() {
		k++
		f.enter(PhaseAwait, now)
		f.enter(PhasePublish, now.Add(time.Microsecond))
		f.enter(PhaseForward, now.Add(2*time.Microsecond))
		f.enter(PhaseSample, now.Add(3*time.Microsecond))
		f.enter(PhaseReply, now.Add(4*time.Microsecond))
		f.stepDone(k, 4, now.Add(5*time.Microsecond))
		m.observeBroadcast(nil, now)
	})
	if allocs != 0 {
		t.Errorf("%v allocations per step, want 0", allocs)
	}
}
