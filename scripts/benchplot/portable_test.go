package main

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestPortableSection(t *testing.T) {
	dir := t.TempDir()
	line := func(build, mode string, batch, round int, ms string) string {
		return `{"bench":"portable","build":"` + build + `","round":` + string(rune('0'+round)) + `,"impl":"fast","noise":"pool","mode":"` + mode +
			`","vocab":100352,"batch":` + map[int]string{1: "1", 32: "32"}[batch] + `,"iters":30,"median_ms":` + ms + `}` + "\n"
	}
	writeFixture(t, dir, map[string]string{"portable.jsonl": line("native", "topp", 32, 1, "1.0") + line("purego", "topp", 32, 1, "2.5") +
		line("native", "plain", 32, 1, "0.3") + line("purego", "plain", 32, 1, "2.2") +
		line("native", "plain", 32, 2, "0.5") + line("purego", "plain", 32, 2, "1.8") +
		line("native", "plain", 1, 1, "0.01") + line("purego", "plain", 1, 1, "0.04") +
		line("native", "greedy", 32, 1, "0.2")})
	b := string(section(t, dir))
	for _, want := range []string{
		"| plain | 1 | 0.010 | 0.040 | 4.0× | ≤ 0.1: met |",
		"| plain | 32 | 0.300 / 0.500 | 2.200 / 1.800 | 5.0× | ≤ 2.0: met |",
		"| topp | 32 | 1.000 | 2.500 | 2.5× | ≤ 5.0: met |",
		"Left out, measured on one build only: greedy batch 32.",
	} {
		if !strings.Contains(b, want) {
			t.Errorf("section lacks %q\n%s", want, b)
		}
	}
	if i, j := strings.Index(b, "| plain | 1 |"), strings.Index(b, "| topp | 32 |"); i < 0 || j < i {
		t.Errorf("rows out of order:\n%s", b)
	}
	checkPNG(t, filepath.Join(dir, "portable.png"))
}

func TestPortableSectionRefusals(t *testing.T) {
	for _, tc := range []struct{ line, want string }{
		{`{"mode":"plain","batch":32,"median_ms":1}`, "without build"},
		{`{"build":"native","mode":"plain","batch":32,"median_ms":1}`, "no case has lines of both builds"},
	} {
		r, err := parseLine([]byte(tc.line))
		if err != nil {
			t.Fatal(err)
		}
		if err := (&gen{}).portable([]record{r}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("portable(%s) = %v, want an error containing %q", tc.line, err, tc.want)
		}
	}
}
