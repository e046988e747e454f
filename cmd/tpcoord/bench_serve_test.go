//go:build !agentonly

package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tpcoord/tpcoord/cmd/tpcoord/internal/bench/serve"
)

// TestBenchServeJSON runs a tiny load over both paths against a real job
// and a real gateway, and checks the lines' fields, never a
// time.
func TestBenchServeJSON(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real cluster")
	}
	for _, tc := range []struct{ gw, client string }{
		{serve.GatewayLaunch, serve.HTTPClientRaw}, {serve.GatewayInProcess, serve.HTTPClientNetHTTP},
	} {
		t.Run(tc.gw, func(t *testing.T) { benchServeJSON(t, tc.gw, tc.client) })
	}
}

func benchServeJSON(t *testing.T, gw, httpClient string) {
	out, err := execBench(t, newBenchServeCmd(), "--nproc", "2", "--clients", "2", "--requests", "3", "--rounds", "2",
		"--max-tokens", "4", "--vocab", "4096", "--forward-time", "1ms", "--json", "--gateway", gw, "--http-client", httpClient)
	if err != nil {
		t.Fatalf("bench serve: %v\noutput:\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 5 {
		t.Fatalf("got %d lines, want 4 rounds and a summary:\n%s", len(lines), out)
	}
	for i, line := range lines[:4] {
		var r serve.RoundResult
		decodeStrictLine(t, line, &r)
		wantPath := []string{serve.PathHTTP, serve.PathNATS}[i%2]
		if r.Kind != "round" || r.Path != wantPath || r.Round != i/2 {
			t.Errorf("line %d: %+v, want round %d of %s", i, r, i/2, wantPath)
		}
		if r.Requests != 3 || r.OutputTokens != 3*4 || !(r.TokensPerS > 0 && r.TTFTP50MS > 0 && r.ITLP50MS >= 0) {
			t.Errorf("line %d: %+v", i, r)
		}
	}
	var s serve.Summary
	decodeStrictLine(t, lines[4], &s)
	if s.Kind != "summary" || s.HTTP.Rounds != 2 || s.NATS.Rounds != 2 || len(s.PairRatios) != 2 {
		t.Errorf("summary %+v", s)
	}
	if s.NProc != 2 || s.Clients != 2 || s.Requests != 3 || s.MaxTokens != 4 || s.Vocab != 4096 || s.ForwardTimeMS != 1 || s.DurationS != 0 || s.Gateway != gw || s.HTTPClient != httpClient {
		t.Errorf("summary setup %+v", s.Setup)
	}
	if want := s.HTTP.TokensPerS / s.NATS.TokensPerS; s.TokensRatio != want {
		t.Errorf("ratio %v, want %v", s.TokensRatio, want)
	}
}

func decodeStrictLine(t *testing.T, line string, v any) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%v: %s", err, line)
	}
}

func TestBenchServeBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"--clients", "0"}, "--clients"},
		{[]string{"--rounds", "0"}, "--rounds"},
		{[]string{"--max-tokens", "0"}, "--max-tokens"},
		{[]string{"--requests", "4", "--duration", "1s"}, "--duration"},
		{[]string{"--duration", "0"}, "--duration"},
		{[]string{"--forward-time", "-1ms"}, "--forward-time"},
		{[]string{"--http-client", "curl"}, "--http-client"},
	} {
		_, err := execBench(t, newBenchServeCmd(), tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("%v: error %v, want one naming %s", tc.args, err, tc.flag)
		}
	}
}
