package main

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestPathSection(t *testing.T) {
	dir := t.TempDir()
	line := func(variant string, tps int, fwd, smp float64) string {
		return `{"bench":"e2e-path","variant":"` + variant + `","kind":"combo","batch":32,"forward_time_ms":20,"tokens":128,"output_tokens_per_s":` +
			strconv.Itoa(tps) + `,"step_mean_ms":{"steps":129,"forward":` + strconv.FormatFloat(fwd, 'f', -1, 64) + `,"sample":` +
			strconv.FormatFloat(smp, 'f', -1, 64) + `,"publish":0.2,"reply":0.1,"total":` + strconv.FormatFloat(fwd+smp+0.3, 'f', -1, 64) + `}}` + "\n"
	}
	writeFixture(t, dir, map[string]string{
		"path.jsonl": line("old", 1400, 21, 0.7) + line("cur", 1500, 20.1, 0.6) + line("old", 1440, 21.2, 0.9) + line("cur", 1480, 20.3, 0.8) +
			`{"bench":"e2e-path","variant":"cur","kind":"stage","stage":"noise","off":"sync","on":"pool"}` + "\n",
	})
	b := section(t, dir)
	for _, want := range []string{
		"Ceiling 1600 tokens/s",
		"| 128 | old | 1400 / 1440 | 1420 | 88.8% | 22.20 | 21.10 | 0.80 | 0.20 | 0.10 |",
		"| 128 | cur | 1500 / 1480 | 1490 | 93.1% | 21.20 | 20.20 | 0.70 | 0.20 | 0.10 |",
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("section lacks %q\n%s", want, b)
		}
	}
	checkPNG(t, filepath.Join(dir, "e2e-path.png"))
}

// TestPathSectionErrors: a line without rank 0's mean step, or lines of
// two ceilings, are refused by name rather than drawn.
func TestPathSectionErrors(t *testing.T) {
	for _, tc := range []struct{ lines, want string }{
		{`{"bench":"e2e-path","variant":"cur","batch":32,"forward_time_ms":20,"tokens":128,"output_tokens_per_s":1500}`, `variant "cur", 128 tokens, has no step_mean_ms`},
		{`{"bench":"e2e-path","variant":"cur","batch":32,"forward_time_ms":20,"tokens":128,"step_mean_ms":{"total":21}}
{"bench":"e2e-path","variant":"old","batch":16,"forward_time_ms":20,"tokens":128,"step_mean_ms":{"total":21}}`, "ceilings 1600 and 800"},
	} {
		var recs []record
		for _, l := range strings.Split(tc.lines, "\n") {
			r, err := parseLine([]byte(l))
			if err != nil {
				t.Fatal(err)
			}
			recs = append(recs, r)
		}
		if err := (&gen{}).pathE2E(recs); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("pathE2E = %v, want an error containing %q", err, tc.want)
		}
	}
}
