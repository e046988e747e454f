//go:build !agentonly

package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tpcoord/tpcoord/cmd/tpcoord/internal/bench/startup"
)

// TestBenchLaunchJSON starts real jobs of 1 and 2 ranks (through the
// TPC_RUN_AS_TPCOORD hook of selfexec_test.go), a launch flag passed after
// --, and checks the lines' fields, never a time.
func TestBenchLaunchJSON(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real jobs")
	}
	out, err := execBench(t, newBenchLaunchCmd(), "--nproc", "1,2", "--runs", "2", "--json", "--", "--vocab", "1024")
	if err != nil {
		t.Fatalf("bench launch: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("got %d lines, want 2:\n%s", len(lines), out)
	}
	for i, line := range lines {
		var r startup.Result
		dec := json.NewDecoder(strings.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		if r.NProc != i+1 || len(r.Runs) != 2 {
			t.Fatalf("line %d: nproc %d, %d runs: %s", i, r.NProc, len(r.Runs), line)
		}
		for _, s := range r.Runs {
			// launch and its ranks; each process ran and faulted in pages.
			if s.Procs != r.NProc+1 || !(s.ReadyS > 0) || !(s.CPUS > 0) || !(s.FaultsPerProc > 100) {
				t.Errorf("nproc %d: run %+v", r.NProc, s)
			}
		}
		if !(r.ReadyP50S > 0 && r.CPUP50S > 0 && r.CPUPerProcP50MS > 0 && r.FaultsPerProcP50 > 0) {
			t.Errorf("nproc %d: medians %+v", r.NProc, r)
		}
		if r.TargetMet != nil || r.TargetS != 0 {
			t.Errorf("nproc %d carries the 64-rank target: %+v", r.NProc, r)
		}
		if r.CPU == "" || r.Cores < 1 || !strings.HasPrefix(r.Go, "go") {
			t.Errorf("machine %q %d %q", r.CPU, r.Cores, r.Go)
		}
	}
}

func TestBenchLaunchBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"--nproc", "0"}, "--nproc"},
		{[]string{"--nproc", "65"}, "--nproc"},
		{[]string{"--runs", "0"}, "--runs"},
		{[]string{"--timeout", "0s"}, "--timeout"},
	} {
		if _, err := execBench(t, newBenchLaunchCmd(), tc.args...); err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("%v: error %v, want one naming %s", tc.args, err, tc.flag)
		}
	}
}
