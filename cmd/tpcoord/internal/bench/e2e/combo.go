package e2e

import (
	"fmt"
	"strings"
)

// Combo is one switch position of each of the three stages: launch's
// --noise, --sampling and --sampling-ranks.
type Combo struct {
	Noise, Sampling, Ranks string
}

func (c Combo) String() string { return c.Noise + "+" + c.Sampling + "+" + c.Ranks }

// The baseline is what the upstream work started from; the full
// optimisation has every stage switched on.
var (
	Baseline = Combo{"sync", "softmax", "all"}
	Full     = Combo{"pool", "logspace", "rank0"}
)

// Stage is one stage of the optimisation: its flag and the flag's off and
// on values.
type Stage struct {
	Name    string
	Off, On string
	set     func(c *Combo, v string)
}

// Stages are the three stages, in the order of their lines.
func Stages() []Stage {
	return []Stage{
		{"noise", "sync", "pool", func(c *Combo, v string) { c.Noise = v }},
		{"sampling", "softmax", "logspace", func(c *Combo, v string) { c.Sampling = v }},
		{"sampling-ranks", "all", "rank0", func(c *Combo, v string) { c.Ranks = v }},
	}
}

// allCombos lists the 8 combinations, baseline first.
func allCombos() []Combo {
	var out []Combo
	for _, n := range []string{"sync", "pool"} {
		for _, s := range []string{"softmax", "logspace"} {
			for _, r := range []string{"all", "rank0"} {
				out = append(out, Combo{n, s, r})
			}
		}
	}
	return out
}

// selectCombos parses --combos (noise+sampling+ranks, or all) into the
// combinations to run, in canonical order (the baseline first), each once.
func selectCombos(list []string) ([]Combo, error) {
	all := allCombos()
	want := map[Combo]bool{}
	for _, s := range list {
		if s == "all" {
			for _, c := range all {
				want[c] = true
			}
			continue
		}
		var c Combo
		if parts := strings.Split(s, "+"); len(parts) == 3 {
			c = Combo{parts[0], parts[1], parts[2]}
		}
		found := false
		for _, a := range all {
			found = found || a == c
		}
		if !found {
			return nil, fmt.Errorf("--combos: %q is not noise+sampling+ranks with noise sync|pool, sampling softmax|logspace, ranks all|rank0", s)
		}
		want[c] = true
	}
	var out []Combo
	for _, c := range all {
		if want[c] {
			out = append(out, c)
		}
	}
	return out, nil
}
