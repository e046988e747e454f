//go:build !agentonly

package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/tpcoord/tpcoord/cmd/tpcoord/internal/bench/e2e"
	"github.com/tpcoord/tpcoord/coordinator/agent"
)

func runBenchE2ECmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return execBench(t, newBenchE2ECmd(), args...)
}

// TestBenchE2EJSON runs two combinations on a real tiny cluster and checks
// the lines' fields, never a time.
func TestBenchE2EJSON(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real clusters")
	}
	out, err := runBenchE2ECmd(t, "--nproc", "2", "--batch", "2", "--vocab", "4096", "--tokens", "4",
		"--forward-time", "1ms", "--combos", "pool+softmax+all,sync+softmax+all", "--json")
	if err != nil {
		t.Fatalf("bench e2e: %v\noutput:\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2+len(e2e.Stages()) {
		t.Fatalf("got %d lines, want %d:\n%s", len(lines), 2+len(e2e.Stages()), out)
	}
	want := []e2e.Combo{e2e.Baseline, {Noise: "pool", Sampling: "softmax", Ranks: "all"}} // baseline first
	var rates []float64
	for i, line := range lines[:2] {
		var r e2e.Result
		dec := json.NewDecoder(strings.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("line %d: %v: %s", i, err, line)
		}
		w := want[i]
		if r.Kind != "combo" || r.Combo != w.String() || r.Noise != w.Noise || r.Sampling != w.Sampling || r.SamplingRanks != w.Ranks {
			t.Errorf("line %d: combination %+v, want %s", i, r, w)
		}
		if r.NProc != 2 || r.Batch != 2 || r.Vocab != 4096 || r.Tokens != 4 || r.ForwardTimeMS != 1 {
			t.Errorf("line %d: configuration %+v", i, r)
		}
		if w.Noise == "pool" {
			if p := r.Pool; p == nil || p.Taken == 0 || p.Producers < 1 || (p.Form != "exact" && p.Form != "bound") || p.Inline > p.Taken {
				t.Errorf("line %d: noise pool %+v", i, p)
			}
		} else if r.Pool != nil {
			t.Errorf("line %d: noise pool %+v without a pool", i, r.Pool)
		}
		if r.OutputTokens != 2*4 {
			t.Errorf("line %d: %d output tokens, want 8 (ignore_eos)", i, r.OutputTokens)
		}
		if !(r.TotalS > 0 && r.TokensPerS > 0) {
			t.Errorf("line %d: total_s %v, tokens/s %v", i, r.TotalS, r.TokensPerS)
		}
		if r.CPU == "" || r.Cores < 1 || !strings.HasPrefix(r.Go, "go") {
			t.Errorf("line %d: machine %q %d %q", i, r.CPU, r.Cores, r.Go)
		}
		if r.VsBaseline == nil {
			t.Fatalf("line %d: no vs_baseline", i)
		}
		rates = append(rates, r.TokensPerS)
		if want := r.TokensPerS / rates[0]; *r.VsBaseline != want {
			t.Errorf("line %d: vs_baseline %v, want %v", i, *r.VsBaseline, want)
		}
	}
	for i, line := range lines[2:] {
		var s e2e.StageResult
		dec := json.NewDecoder(strings.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&s); err != nil {
			t.Fatalf("stage line %d: %v: %s", i, err, line)
		}
		if s.Kind != "stage" || s.Stage != e2e.Stages()[i].Name || s.OffAlone != nil {
			t.Errorf("stage line %d: %+v", i, s)
		}
		// Only the noise stage's "only on" combination was measured.
		if got := s.OnAlone != nil; got != (s.Stage == "noise") {
			t.Errorf("stage %s: only_on_vs_baseline %v", s.Stage, s.OnAlone)
		} else if got && *s.OnAlone != rates[1]/rates[0] {
			t.Errorf("stage noise: only_on_vs_baseline %v, want %v", *s.OnAlone, rates[1]/rates[0])
		}
	}
}

func TestBenchE2EBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"--nproc", "0"}, "--nproc"},
		{[]string{"--batch", "0"}, "--batch"},
		{[]string{"--vocab", "8"}, "--vocab"},
		{[]string{"--tokens", "0"}, "--tokens"},
		{[]string{"--forward-time", "-1ms"}, "--forward-time"},
		{[]string{"--combos", "pool+softmax"}, "--combos"},
		{[]string{"--combos", "inline+softmax+all"}, "--combos"},
	} {
		_, err := runBenchE2ECmd(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("%v: error %v, want one naming %s", tc.args, err, tc.flag)
		}
	}
}

func TestAgentSamplingFlags(t *testing.T) {
	for _, tc := range []struct {
		edit func(*agentOptions)
		flag string // "" for valid
	}{
		{func(c *agentOptions) { c.Noise = agent.NoiseSync }, ""},
		{func(c *agentOptions) { c.Sampling = agent.SamplingSoftmax }, ""},
		{func(c *agentOptions) { c.SamplingRanks = agent.SamplingRanksAll }, ""},
		{func(c *agentOptions) { c.Noise = agent.Noise("async") }, "noise"},
		{func(c *agentOptions) { c.Sampling = agent.Sampling("greedy") }, "sampling"},
		{func(c *agentOptions) { c.SamplingRanks = agent.SamplingRanks("some") }, "sampling-ranks"},
	} {
		c := validAgentConfig(t)
		tc.edit(&c)
		err := c.validate()
		switch {
		case tc.flag == "" && err != nil:
			t.Errorf("%s: %v", tc.flag, err)
		case tc.flag != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.flag+":")):
			t.Errorf("error %v, want one naming %s", err, tc.flag)
		}
	}
	a, b := validAgentConfig(t), validAgentConfig(t)
	b.SamplingRanks = agent.SamplingRanksAll
	if a.Digest() == b.Digest() {
		t.Error("sampling-ranks does not change the config digest")
	}
}

// validAgentConfig is the agent's defaults.
// TestBaselineFlagsHidden: the benchmark baselines (--noise sync,
// --sampling softmax, --sampling-ranks all) are not in agent's or
// launch's help, and still set the configuration from flags, TPC_* and
// the config file alike.
func TestBaselineFlagsHidden(t *testing.T) {
	for _, cmd := range []string{"agent", "launch"} {
		var stdout, stderr bytes.Buffer
		if code := run([]string{cmd, "--help"}, &stdout, &stderr); code != 0 {
			t.Fatalf("%s --help: exit %d: %s", cmd, code, stderr.String())
		}
		help := stdout.String()
		if !strings.Contains(help, "--noise ") || strings.Contains(help, "--sampling") || strings.Contains(help, "sync") {
			t.Errorf("%s --help shows a baseline (or no --noise):\n%s", cmd, help)
		}
	}
	var c agentOptions
	fs := pflag.NewFlagSet("agent", pflag.ContinueOnError)
	c.flags(fs)
	t.Setenv("TPC_SAMPLING_RANKS", "all")
	if err := fs.Parse([]string{"--noise", "sync", "--sampling", "softmax"}); err != nil {
		t.Fatal(err)
	}
	if err := layerConfig(fs); err != nil {
		t.Fatal(err)
	}
	if c.Noise != agent.NoiseSync || c.Sampling != agent.SamplingSoftmax || c.SamplingRanks != agent.SamplingRanksAll {
		t.Errorf("noise %q, sampling %q, sampling-ranks %q; want the baselines", c.Noise, c.Sampling, c.SamplingRanks)
	}
	if err := c.validate(); err != nil {
		t.Error(err)
	}
}

func validAgentConfig(t *testing.T) agentOptions {
	t.Helper()
	var c agentOptions
	c.flags(pflag.NewFlagSet("agent", pflag.ContinueOnError))
	if err := c.validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	return c
}
