package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	fixtureSampler = `{"impl":"fast","noise":"pool","mode":"plain","vocab":100352,"batch":1,"iters":3,"median_ms":0.035,"p90_ms":0.04,"cpu":"Test CPU","cores":2,"go":"go1.26"}
{"impl":"fast","noise":"pool","mode":"plain","vocab":100352,"batch":32,"iters":3,"median_ms":1.15,"p90_ms":1.2,"cpu":"Test CPU","cores":2,"go":"go1.26"}
{"impl":"fast","noise":"inline","mode":"plain","vocab":100352,"batch":32,"iters":3,"median_ms":2.5,"p90_ms":2.6,"cpu":"Test CPU","cores":2,"go":"go1.26"}
{"impl":"reference","noise":"inline","mode":"plain","vocab":100352,"batch":1,"iters":3,"median_ms":2.6,"p90_ms":2.7,"cpu":"Test CPU","cores":2,"go":"go1.26"}
{"impl":"reference","noise":"inline","mode":"plain","vocab":100352,"batch":32,"iters":3,"median_ms":83,"p90_ms":85,"cpu":"Test CPU","cores":2,"go":"go1.26"}
{"impl":"fast","noise":"pool","mode":"topk","vocab":100352,"batch":32,"iters":3,"median_ms":0.89,"p90_ms":0.9,"cpu":"Test CPU","cores":2,"go":"go1.26"}
`
	fixtureBroadcast = `{"transport":"tcp","followers":1,"payload":256,"interval_us":200,"p50_us":100,"p99_us":200,"lost":0,"cpu":"Test CPU","cores":2,"go":"go1.26"}
{"transport":"nats","followers":1,"payload":256,"interval_us":200,"p50_us":230,"p99_us":600,"lost":0,"cpu":"Test CPU","cores":2,"go":"go1.26"}
{"transport":"tcp","followers":8,"payload":256,"interval_us":200,"p50_us":290,"p99_us":880,"lost":0,"cpu":"Test CPU","cores":2,"go":"go1.26"}
{"transport":"nats","followers":8,"payload":256,"interval_us":200,"p50_us":515,"p99_us":1946,"lost":1,"cpu":"Test CPU","cores":2,"go":"go1.26"}
`
	fixtureE2E = `{"kind":"combo","cpu":"Test CPU","cores":2,"go":"go1.26","cpus":"0-1","nproc":4,"batch":32,"vocab":100352,"forward_time_ms":20,"tokens":64,"combo":"sync+softmax+all","noise":"sync","sampling":"softmax","sampling_ranks":"all","output_tokens":2048,"total_s":19.76,"output_tokens_per_s":103.6,"vs_baseline":1}
{"kind":"combo","cpu":"Test CPU","cores":2,"go":"go1.26","cpus":"0-1","nproc":4,"batch":32,"vocab":100352,"forward_time_ms":20,"tokens":64,"combo":"pool+logspace+rank0","noise":"pool","sampling":"logspace","sampling_ranks":"rank0","output_tokens":2048,"total_s":1.58,"output_tokens_per_s":1298.7,"vs_baseline":12.53}
{"kind":"stage","stage":"noise","off":"sync","on":"pool","only_on_vs_baseline":1.39,"full_vs_only_off":1.27}
`
	fixtureNoise = `{"case":"fillrow","producers":1,"vocab":100352,"unit":"ns_per_value_per_core","median":0.42,"cpu":"Test CPU","cores":2,"go":"go1.26"}
{"case":"mathlog","producers":1,"vocab":100352,"unit":"ns_per_value_per_core","median":28,"cpu":"Test CPU","cores":2,"go":"go1.26"}
{"case":"pool_take32","producers":1,"vocab":100352,"unit":"us_per_take","median":6.9,"cpu":"Test CPU","cores":2,"go":"go1.26"}
`
	fixtureStep = `{"nproc":8,"batch":32,"vocab":4096,"tokens":64,"forward_time_ms":0,"steps":65,"overhead_p50_us":168,"overhead_p90_us":3726,"overhead_p99_us":6257,"floor_p50_us":185.3,"floor_p99_us":1507,"overhead_p50_over_floor_p50":0.91,"target_ratio":1.5,"target_met":true}
`
	fixtureOther = `{"thing":"x|y","value":1.5}
`
)

func writeFixture(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func fixture(t *testing.T) string {
	dir := t.TempDir()
	writeFixture(t, dir, map[string]string{
		"sampler.jsonl":   fixtureSampler,
		"broadcast.jsonl": fixtureBroadcast,
		"e2e.jsonl":       fixtureE2E,
		"noise.jsonl":     fixtureNoise,
		"step.jsonl":      fixtureStep,
		"other.jsonl":     fixtureOther,
		"commands.txt":    "sampler\ttpcoord bench sampler --json --batch 1,32\n",
	})
	return dir
}

// section runs benchplot on the results in dir and returns the markdown
// section it wrote there.
func section(t *testing.T, dir string) []byte {
	t.Helper()
	var stderr bytes.Buffer
	if err := run([]string{"--results", dir}, &stderr); err != nil {
		t.Fatalf("run: %v\n%s", err, stderr.String())
	}
	b, err := os.ReadFile(filepath.Join(dir, "section.md"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func checkPNG(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) < 100 || !bytes.HasPrefix(data, []byte("\x89PNG\r\n\x1a\n")) {
		t.Errorf("%s: not a PNG (%d bytes)", path, len(data))
	}
}

func TestSectionAndPNGs(t *testing.T) {
	dir := fixture(t)
	pngDir := filepath.Join(t.TempDir(), "png")
	md := filepath.Join(dir, "out.md")
	var stderr bytes.Buffer
	if err := run([]string{"--results", dir, "--png-dir", pngDir, "--md-out", md, "--date", "2026-01-02"}, &stderr); err != nil {
		t.Fatalf("run: %v\n%s", err, stderr.String())
	}
	b, err := os.ReadFile(md)
	if err != nil {
		t.Fatal(err)
	}
	out := string(b)
	for _, want := range []string{
		"Machine: `Test CPU`, 2 cores, go1.26",
		"    tpcoord bench sampler --json --batch 1,32",
		"### Sampler: median ms per call",
		"| mode | batch | fast/pool | fast/inline | reference | pytorch (quoted) | reference × | pytorch × |",
		"| plain | 32 | 1.15 | 2.50 | 83.0 | 37.7 *quoted* | 72× | 33× |",
		"| plain | 1 | 0.035 |  | 2.60 | 1.31 *quoted* | 74× | 37× |",
		"### Noise generation",
		"| fillrow | 1 | 100352 | ns_per_value_per_core | 0.42 |",
		"### Broadcast fan-out",
		"| 8 | 515 | 1946 | 290 | 880 | 1.8× | 2.2× | 1 / 0 |",
		"### Coordinator overhead per step",
		"| 8 | 65 | 168 | 3726 | 6257 | 185 | 1507 | 0.91 | 1.50 | true |",
		"### End to end: output tokens/s",
		"whole launch under `taskset -c 0-1`",
		"| pool+logspace+rank0 | 1298.7 | 1.58 | 12.53 |",
		"| noise: sync -> pool | 1.39 | 1.27 |",
		"### other",
		`| x\|y | 1.5 |`,
		"![broadcast latency](",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("section lacks %q\n%s", want, out)
		}
	}
	for _, name := range []string{"sampler-plain-v100352.png", "sampler-topk-v100352.png", "broadcast.png", "e2e.png", "noise.png"} {
		checkPNG(t, filepath.Join(pngDir, name))
		if !strings.Contains(out, name+")") {
			t.Errorf("section does not link %s", name)
		}
	}
}

// With gloo lines the broadcast table has gloo's columns; a NATS line with
// a MAC does not replace NATS's.
func TestBroadcastGloo(t *testing.T) {
	dir := t.TempDir()
	writeFixture(t, dir, map[string]string{"broadcast.jsonl": fixtureBroadcast +
		`{"transport":"nats","mac":true,"followers":8,"payload":256,"interval_us":200,"p50_us":9999,"p99_us":9999,"lost":0}` + "\n" +
		`{"transport":"gloo","mac":false,"followers":8,"payload":256,"interval_us":200,"p50_us":725,"p99_us":4400,"lost":0}` + "\n"})
	b := section(t, dir)
	for _, want := range []string{
		"| followers | NATS p50 | NATS p99 | TCP p50 | TCP p99 | gloo p50 | gloo p99 | p50 NATS/TCP | p99 NATS/TCP | p50 gloo/TCP | p99 gloo/TCP | lost (NATS/TCP/gloo) |",
		"| 8 | 515 | 1946 | 290 | 880 | 725 | 4400 | 1.8× | 2.2× | 2.5× | 5.0× | 1 / 0 / 0 |",
		"| 1 | 230 | 600 | 100 | 200 |  |  | 2.3× | 3.0× |  |  | 0 / 0 /  |",
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("section lacks %q\n%s", want, b)
		}
	}
}

func TestMeasuredPyTorch(t *testing.T) {
	dir := t.TempDir()
	writeFixture(t, dir, map[string]string{
		"sampler.jsonl": fixtureSampler,
		"pytorch.jsonl": `{"impl":"pytorch","noise":"inline","mode":"plain","vocab":100352,"batch":32,"iters":3,"median_ms":23,"p90_ms":25}` + "\n",
	})
	b := section(t, dir)
	out := string(b)
	if strings.Contains(out, "quoted") {
		t.Errorf("measured PyTorch figures should not be labelled quoted:\n%s", out)
	}
	if !strings.Contains(out, "| plain | 32 | 1.15 | 2.50 | 83.0 | 23.0 | 72× | 20× |") {
		t.Errorf("no measured PyTorch column:\n%s", out)
	}
	checkPNG(t, filepath.Join(dir, "sampler-plain-v100352.png"))
}

func TestSplice(t *testing.T) {
	doc := "# Title\n\ntext\n"
	got, err := splice(doc, "one\n")
	if err != nil {
		t.Fatal(err)
	}
	want := doc + "\n" + beginMarker + "\none\n" + endMarker + "\n"
	if got != want {
		t.Fatalf("append:\n%q\nwant\n%q", got, want)
	}
	again, err := splice(got+"after\n", "two")
	if err != nil {
		t.Fatal(err)
	}
	if want := doc + "\n" + beginMarker + "\ntwo\n" + endMarker + "\nafter\n"; again != want {
		t.Fatalf("replace:\n%q\nwant\n%q", again, want)
	}
	if _, err := splice(endMarker+"\n"+beginMarker, "x"); err == nil {
		t.Error("reversed markers accepted")
	}
}

func TestNoResults(t *testing.T) {
	var stderr bytes.Buffer
	if err := run([]string{"--results", t.TempDir()}, &stderr); err == nil {
		t.Error("empty results dir accepted")
	}
	if err := run(nil, &stderr); err == nil {
		t.Error("missing --results accepted")
	}
}
