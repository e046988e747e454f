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
