//go:build !agentonly

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tpcoord/tpcoord/cmd/tpcoord/internal/bench/stats"
	"github.com/tpcoord/tpcoord/cmd/tpcoord/internal/bench/structured"
)

// TestBenchStructuredJSON runs two tiny rounds on a real job (the
// synthetic executor, cl100k_base on rank 0) and checks the lines' shape
// and counts, never a time: every unconstrained request gives its
// max_tokens, and every constrained one, under a schema short enough to
// end within them, stops with JSON.
func TestBenchStructuredJSON(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real cluster")
	}
	schema := filepath.Join(t.TempDir(), "yes-no.json")
	if err := os.WriteFile(schema, []byte(`{"enum":["yes","no"]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := execBench(t, newBenchStructuredCmd(), "--nproc", "2", "--batch", "4", "--tokens", "8",
		"--forward-time", "1ms", "--rounds", "2", "--schema", schema, "--json")
	if err != nil {
		t.Fatalf("bench structured: %v\noutput:\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 8 {
		t.Fatalf("got %d lines, want a warm-up, two rounds of two batches and a round line, and a summary:\n%s", len(lines), out)
	}
	var warm structured.BatchResult
	decodeStrictLine(t, lines[0], &warm)
	if warm.Kind != "warmup" || warm.Batch != structured.KindConstrained || warm.Requests != 4 {
		t.Errorf("warm-up line %+v", warm)
	}
	for r := range 2 {
		var a, b structured.BatchResult
		var rr structured.RoundResult
		decodeStrictLine(t, lines[1+3*r], &a)
		decodeStrictLine(t, lines[2+3*r], &b)
		decodeStrictLine(t, lines[3+3*r], &rr)
		unc, con := a, b
		if r%2 == 1 { // constrained first in odd rounds
			unc, con = b, a
		}
		if unc.Batch != structured.KindUnconstrained || unc.OutputTokens != 4*8 || unc.Stopped != 0 || unc.Round != r {
			t.Errorf("round %d unconstrained: %+v", r, unc)
		}
		// At most 5 tokens ("yes" quoted, a byte a token) and EOS.
		if con.Batch != structured.KindConstrained || con.OutputTokens < 4 || con.OutputTokens > 4*6 || con.Stopped != 4 || con.JSONValid != 4 {
			t.Errorf("round %d constrained: %+v", r, con)
		}
		if unc.Step == nil || unc.Step.Steps < 8 || con.Step == nil {
			t.Errorf("round %d: rank 0's steps %+v, %+v", r, unc.Step, con.Step)
		}
		if rr.Kind != "round" || rr.Round != r || rr.First != a.Batch || rr.Ratio != con.TokensPerS/unc.TokensPerS {
			t.Errorf("round line %+v", rr)
		}
	}
	var s structured.Summary
	decodeStrictLine(t, lines[7], &s)
	if s.Kind != "summary" || len(s.RoundRatios) != 2 || s.Unconstrained.Batches != 2 || s.Constrained.Batches != 2 ||
		s.Ratio != stats.Median(s.RoundRatios) || s.Target != structured.TargetRatio {
		t.Errorf("summary %+v", s)
	}
	if s.NProc != 2 || s.Batch != 4 || s.Tokens != 8 || s.Vocab != 100352 || s.EOS != 100257 || s.Schema != schema || s.Rounds != 2 {
		t.Errorf("summary setup %+v", s.Setup)
	}
}

func TestBenchStructuredBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"--rounds", "0"}, "--rounds"},
		{[]string{"--batch", "0"}, "--batch"},
		{[]string{"--tokenizer", ""}, "--tokenizer"},
		{[]string{"--eos", "-1"}, "--eos"},
		{[]string{"--schema", "/nonexistent/schema.json"}, "--schema"},
	} {
		_, err := execBench(t, newBenchStructuredCmd(), tc.args...)
		if err == nil || !strings.HasPrefix(err.Error(), tc.flag+":") {
			t.Errorf("%v: error %v, want one naming %s", tc.args, err, tc.flag)
		}
	}
}
