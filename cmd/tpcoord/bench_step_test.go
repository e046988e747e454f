package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestBenchStepJSON runs a real tiny cluster (launch and the floor's TCP
// publisher and followers through the TPC_RUN_AS_TPCOORD hook of
// selfexec_test.go) and checks the line's fields, never a time.
func TestBenchStepJSON(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real cluster")
	}
	out, err := execBench(t, newBenchStepCmd(), "--nproc", "2", "--batch", "2", "--tokens", "8",
		"--floor-messages", "50", "--json")
	if err != nil {
		t.Fatalf("bench step: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 1 {
		t.Fatalf("got %d lines, want 1:\n%s", len(lines), out)
	}
	var r benchStepResult
	dec := json.NewDecoder(strings.NewReader(lines[0]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("%v: %s", err, lines[0])
	}
	if r.NProc != 2 || r.Batch != 2 || r.Tokens != 8 || r.Vocab != 4096 || r.ForwardTimeMS != 0 {
		t.Errorf("configuration %+v", r)
	}
	// 2 requests of 8 tokens decode together: at least 8 steps with rows.
	if r.Steps < 8 {
		t.Errorf("%d steps, want >= 8", r.Steps)
	}
	if !(r.StepP50US > 0 && r.OverheadP90US >= r.OverheadP50US && r.OverheadP99US >= r.OverheadP90US) {
		t.Errorf("step figures %+v", r)
	}
	if r.FloorFollowers != 1 || r.FloorPayload != 256 || !(r.FloorP50US > 0 && r.FloorP99US >= r.FloorP50US) {
		t.Errorf("floor %+v", r)
	}
	if r.TargetRatio != bsTargetRatio || (r.OverheadP50US > 0 && r.Ratio != r.OverheadP50US/r.FloorP50US) {
		t.Errorf("ratio %v over %v / %v, target %v", r.Ratio, r.OverheadP50US, r.FloorP50US, r.TargetRatio)
	}
	if r.TargetMet != (r.Ratio > 0 && r.Ratio <= bsTargetRatio) {
		t.Errorf("target_met %v with ratio %v", r.TargetMet, r.Ratio)
	}
	if r.CPU == "" || r.Cores < 1 || !strings.HasPrefix(r.Go, "go") {
		t.Errorf("machine %q %d %q", r.CPU, r.Cores, r.Go)
	}
}

func TestBenchStepParseDump(t *testing.T) {
	dump := `flight recorder job j rank 0: phase idle for 1ms; last 3 of 9 steps (ms):
      step start                       rows      await    publish    forward     sample      reply      total
         7 2026-01-02T03:04:05.000100     0      0.001      0.000      0.000      0.000      0.000      0.002
         8 2026-01-02T03:04:05.000200     2      0.010      0.020      0.300      0.040      0.050      0.500
         9 2026-01-02T03:04:06.000000     2      0.010      0.020      0.300      0.040      0.050      0.600
`
	since := time.Date(2026, 1, 2, 3, 4, 5, 150_000, time.UTC)
	steps, complete, err := bsParseDump([]byte(dump), since)
	if err != nil || !complete {
		t.Fatalf("complete %v, err %v", complete, err)
	}
	if len(steps) != 2 || steps[0].Step != 8 || steps[1].Step != 9 || steps[0].Rows != 2 || steps[1].TotalMs != 0.6 {
		t.Fatalf("steps %+v", steps)
	}
	r := bsSummarize(steps)
	if r.Steps != 2 || r.OverheadP50US < 159 || r.OverheadP50US > 161 || r.OverheadP99US < 259 || r.OverheadP99US > 261 {
		t.Errorf("summary %+v", r)
	}
	// A dump cut short is not complete.
	if _, complete, err := bsParseDump([]byte(dump[:len(dump)-100]), since); err == nil && complete {
		t.Error("a truncated dump parsed as complete")
	}
}

func TestBenchStepBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"--nproc", "0"}, "--nproc"},
		{[]string{"--batch", "0"}, "--batch"},
		{[]string{"--vocab", "8"}, "--vocab"},
		{[]string{"--tokens", "0"}, "--tokens"},
		{[]string{"--forward-time", "-1ms"}, "--forward-time"},
		{[]string{"--floor-messages", "5"}, "--messages"},
	} {
		if _, err := execBench(t, newBenchStepCmd(), tc.args...); err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("%v: error %v, want one naming %s", tc.args, err, tc.flag)
		}
	}
}
