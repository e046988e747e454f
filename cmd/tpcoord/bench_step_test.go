//go:build !agentonly

package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tpcoord/tpcoord/cmd/tpcoord/internal/bench/step"
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
	var r step.Result
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
	if r.TargetRatio != step.TargetRatio || (r.OverheadP50US > 0 && r.Ratio != r.OverheadP50US/r.FloorP50US) {
		t.Errorf("ratio %v over %v / %v, target %v", r.Ratio, r.OverheadP50US, r.FloorP50US, r.TargetRatio)
	}
	if r.TargetMet != (r.Ratio > 0 && r.Ratio <= step.TargetRatio) {
		t.Errorf("target_met %v with ratio %v", r.TargetMet, r.Ratio)
	}
	if r.CPU == "" || r.Cores < 1 || !strings.HasPrefix(r.Go, "go") {
		t.Errorf("machine %q %d %q", r.CPU, r.Cores, r.Go)
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
