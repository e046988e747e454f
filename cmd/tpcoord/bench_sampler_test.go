//go:build !agentonly

package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/tpcoord/tpcoord/cmd/tpcoord/internal/bench/sampler"
)

func TestBenchSampler(t *testing.T) {
	cmd := newBenchSamplerCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--vocab", "2000", "--batch", "2,3", "--mode", "plain,topp", "--impl", "fast,reference", "--noise", "pool,inline", "--iters", "3", "--json"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 16 {
		t.Fatalf("%d lines, want 16:\n%s", len(lines), out.String())
	}
	for _, l := range lines {
		var r sampler.Result
		if err := json.Unmarshal([]byte(l), &r); err != nil || r.MedianMS <= 0 || r.P90MS < r.MedianMS || r.Go == "" || r.Cores < 1 {
			t.Fatalf("bad line %q: %v", l, err)
		}
	}
	cmd = newBenchSamplerCmd()
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs([]string{"--mode", "fancy"})
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "--mode") {
		t.Fatalf("bad mode: %v", err)
	}
}
