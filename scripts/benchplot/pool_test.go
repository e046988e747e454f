package main

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestPoolSections(t *testing.T) {
	dir := t.TempDir()
	line := func(build, form string, tps, inline int) string {
		return `{"bench":"pool-e2e","kind":"combo","build":"` + build + `","noise_form_env":"` + form +
			`","batch":32,"forward_time_ms":20,"output_tokens_per_s":` + strconv.Itoa(tps) +
			`,"noise_pool":{"producers":1,"form":"` + form + `","rows_taken":4096,"rows_inline":` + strconv.Itoa(inline) + `}}` + "\n"
	}
	writeFixture(t, dir, map[string]string{
		"pool.jsonl": line("purego", "exact", 800, 90) + line("purego", "bound", 1300, 0) +
			line("purego", "exact", 900, 10) + line("purego", "bound", 1340, 2) + line("purego", "exact", 700, 30),
		"pg.jsonl": `{"bench":"plain-greedy","mode":"plain","median_ms":0.3,"run":1}
{"bench":"plain-greedy","mode":"greedy","median_ms":0.2,"run":1}
{"bench":"plain-greedy","mode":"plain","median_ms":0.4,"run":2}
{"bench":"plain-greedy","mode":"greedy","median_ms":0.2,"run":2}
{"bench":"plain-greedy","mode":"plain","median_ms":0.5,"run":3}
`,
	})
	b := section(t, dir)
	for _, want := range []string{
		"| purego | exact | 800 / 900 / 700 | 800 | 90 / 10 / 30 |",
		"| purego | bound | 1300 / 1340 | 1320 | 0 / 2 |",
		"| 1 | 0.300 | 0.200 | 1.50 |",
		"| 2 | 0.400 | 0.200 | 2.00 |",
		"Median ratio 1.75.", // run 3 has no greedy: left out
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("section lacks %q\n%s", want, b)
		}
	}
	if strings.Contains(string(b), "| 3 |") {
		t.Errorf("run 3 (no greedy) in the table\n%s", b)
	}
	checkPNG(t, filepath.Join(dir, "pool-e2e.png"))
	checkPNG(t, filepath.Join(dir, "plain-greedy.png"))
}

func TestPathSection(t *testing.T) {
	dir := t.TempDir()
	line := func(variant string, tps int, fwd, smp float64) string {
		return `{"bench":"e2e-path","variant":"` + variant + `","kind":"combo","batch":32,"forward_time_ms":20,"tokens":128,"output_tokens_per_s":` +
			strconv.Itoa(tps) + `,"step_mean_ms":{"steps":129,"forward":` + strconv.FormatFloat(fwd, 'f', -1, 64) + `,"sample":` +
			strconv.FormatFloat(smp, 'f', -1, 64) + `,"publish":0.2,"reply":0.1,"total":` + strconv.FormatFloat(fwd+smp+0.3, 'f', -1, 64) + `}}` + "\n"
	}
	writeFixture(t, dir, map[string]string{
		"path.jsonl": line("old", 1400, 21, 0.7) + line("cur", 1500, 20.1, 0.6) + line("old", 1440, 21.2, 0.9) + line("cur", 1480, 20.3, 0.8),
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
