//go:build !agentonly

package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tpcoord/tpcoord/cmd/tpcoord/internal/bench/noise"
)

// TestBenchNoiseJSON checks every case's line and fields, never a time.
func TestBenchNoiseJSON(t *testing.T) {
	out, err := execBench(t, newBenchNoiseCmd(), "--vocab", "1024", "--rows", "2", "--iters", "3", "--producers", "1,2", "--json")
	if err != nil {
		t.Fatalf("bench noise: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	want := []struct {
		name      string
		producers int
		unit      string
	}{
		{"fillrow", 1, "ns_per_value_per_core"},
		{"fillrow", 2, "ns_per_value_per_core"},
		{"scalar_go", 1, "ns_per_value_per_core"},
		{"mathlog", 1, "ns_per_value_per_core"},
		{"pool_take32", -1, "us_per_take"},
	}
	if len(lines) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%s", len(lines), len(want), out)
	}
	for i, line := range lines {
		var r noise.Result
		dec := json.NewDecoder(strings.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("line %d: %v: %s", i, err, line)
		}
		w := want[i]
		if r.Case != w.name || r.Unit != w.unit || (w.producers > 0 && r.Producers != w.producers) || r.Producers < 1 {
			t.Errorf("line %d: %+v, want %+v", i, r, w)
		}
		if r.Vocab != 1024 || r.Iters != 3 {
			t.Errorf("line %d: configuration %+v", i, r)
		}
		if wantRows := map[bool]int{true: noise.TakeRows, false: 2}[w.name == "pool_take32"]; r.Rows != wantRows {
			t.Errorf("line %d: rows %d, want %d", i, r.Rows, wantRows)
		}
		if !(r.Median > 0 && r.P90 >= r.Median && r.P99 >= r.P90) {
			t.Errorf("line %d: median %v p90 %v p99 %v", i, r.Median, r.P90, r.P99)
		}
		if r.CPU == "" || r.Cores < 1 || !strings.HasPrefix(r.Go, "go") {
			t.Errorf("line %d: machine %q %d %q", i, r.CPU, r.Cores, r.Go)
		}
		if hasVs := r.VsMathlog > 0; hasVs != (w.unit == "ns_per_value_per_core" && w.producers == 1) {
			t.Errorf("line %d: vs_mathlog %v", i, r.VsMathlog)
		}
		if hasTarget := r.TargetNsPerValue > 0; hasTarget != (w.name == "fillrow" || w.name == "scalar_go") {
			t.Errorf("line %d: target_ns_per_value %v", i, r.TargetNsPerValue)
		}
	}
}

func TestBenchNoiseTableAndBadFlags(t *testing.T) {
	out, err := execBench(t, newBenchNoiseCmd(), "--vocab", "64", "--rows", "1", "--iters", "1", "--producers", "1")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "machine: ") || !strings.Contains(out, "pool_take32") {
		t.Errorf("table:\n%s", out)
	}
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"--vocab", "0"}, "--vocab"},
		{[]string{"--rows", "0"}, "--rows"},
		{[]string{"--iters", "0"}, "--iters"},
		{[]string{"--producers", "0"}, "--producers"},
	} {
		if _, err := execBench(t, newBenchNoiseCmd(), tc.args...); err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("%v: error %v, want one naming %s", tc.args, err, tc.flag)
		}
	}
}
