// Command benchplot turns the JSON lines written by scripts/bench.sh (one
// file per `tpcoord bench` command in a results directory) into a markdown
// section and PNG plots.
//
//	benchplot --results DIR --png-dir docs/bench --docs docs/benchmarks.md
//
// With --docs the section replaces the text between the markers
// <!-- bench.sh:begin --> and <!-- bench.sh:end --> (appended at the end of
// the file when absent); without it the section goes to --md-out.
//
// Files are named after the bench command (sampler.jsonl, broadcast.jsonl,
// e2e.jsonl, noise.jsonl, step.jsonl, prefix.jsonl; pytorch.jsonl holds the
// PyTorch sampler lines, torch.jsonl scripts/bench-torch.sh's real-model
// lines). A "bench" field in a line overrides its file name.
// commands.txt ("name<TAB>command" per line) and machine.txt (free text)
// are optional and quoted in the section. Commands this program does not
// know get a generic table of their fields.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

const (
	beginMarker = "<!-- bench.sh:begin -->"
	endMarker   = "<!-- bench.sh:end -->"
)

// record is one JSON line with its keys in the order they were written.
type record struct {
	bench string
	keys  []string
	vals  map[string]any
}

func (r record) str(k string) string {
	switch v := r.vals[k].(type) {
	case string:
		return v
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	case bool:
		return strconv.FormatBool(v)
	}
	return ""
}

func (r record) num(k string) (float64, bool) {
	v, ok := r.vals[k].(float64)
	return v, ok
}

func (r record) has(k string) bool { _, ok := r.vals[k]; return ok }

// parseLine decodes one JSON object keeping its key order.
func parseLine(line []byte) (record, error) {
	dec := json.NewDecoder(bytes.NewReader(line))
	tok, err := dec.Token()
	if err != nil {
		return record{}, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return record{}, errors.New("not a JSON object")
	}
	r := record{vals: map[string]any{}}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return record{}, err
		}
		k, _ := tok.(string)
		var v any
		if err := dec.Decode(&v); err != nil {
			return record{}, err
		}
		if _, dup := r.vals[k]; !dup {
			r.keys = append(r.keys, k)
		}
		r.vals[k] = v
	}
	return r, nil
}

// benchOf names the bench a file's lines belong to.
func benchOf(file string) string {
	b := strings.TrimSuffix(filepath.Base(file), filepath.Ext(file))
	if b == "pytorch" || strings.HasPrefix(b, "vllm") {
		return "sampler"
	}
	return b
}

type results struct {
	byBench  map[string][]record
	order    []string // bench names in first-seen order
	commands [][2]string
	machine  string
}

func load(dir string) (*results, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err != nil {
		return nil, err
	}
	sort.Slice(files, func(i, j int) bool { return rank(files[i]) < rank(files[j]) })
	res := &results{byBench: map[string][]record{}}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(make([]byte, 1<<20), 1<<24)
		for n := 1; sc.Scan(); n++ {
			line := bytes.TrimSpace(sc.Bytes())
			if len(line) == 0 || line[0] != '{' {
				continue // tolerate stray non-JSON output
			}
			r, err := parseLine(line)
			if err != nil {
				return nil, fmt.Errorf("%s:%d: %w", f, n, err)
			}
			r.bench = benchOf(f)
			if b := r.str("bench"); b != "" {
				r.bench = b
			}
			if _, ok := res.byBench[r.bench]; !ok {
				res.order = append(res.order, r.bench)
			}
			res.byBench[r.bench] = append(res.byBench[r.bench], r)
		}
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
	}
	if len(res.order) == 0 {
		return nil, fmt.Errorf("no JSON lines in %s/*.jsonl", dir)
	}
	if data, err := os.ReadFile(filepath.Join(dir, "commands.txt")); err == nil {
		for _, l := range strings.Split(string(data), "\n") {
			if name, cmd, ok := strings.Cut(l, "\t"); ok {
				res.commands = append(res.commands, [2]string{name, cmd})
			}
		}
	}
	if data, err := os.ReadFile(filepath.Join(dir, "machine.txt")); err == nil {
		res.machine = strings.TrimSpace(string(data))
	}
	return res, nil
}

var knownOrder = []string{"sampler", "portable", "plain-greedy", "pytorch", "noise", "broadcast", "step", "e2e", "e2e-path", "launch", "serve", "prefix"}

func rank(file string) int {
	b := strings.TrimSuffix(filepath.Base(file), filepath.Ext(file))
	for i, k := range knownOrder {
		if b == k {
			return i
		}
	}
	return len(knownOrder)
}

// gen writes the section's markdown and the PNGs.
type gen struct {
	res    *results
	pngDir string // where PNGs go
	mdDir  string // directory of the markdown file, for relative links
	script string // the script that ran the benchmarks, named in the section
	md     strings.Builder
	pngs   []string
}

func (g *gen) p(format string, a ...any) { fmt.Fprintf(&g.md, format, a...) }

func (g *gen) link(name, alt string) {
	rel, err := filepath.Rel(g.mdDir, filepath.Join(g.pngDir, name))
	if err != nil {
		rel = filepath.Join(g.pngDir, name)
	}
	g.p("![%s](%s)\n\n", alt, filepath.ToSlash(rel))
}

func (g *gen) save(p *plot.Plot, name string) (err error) {
	path := filepath.Join(g.pngDir, name)
	defer func() {
		if e := recover(); e != nil { // gonum panics on some degenerate data
			err = fmt.Errorf("plot %s: %v", path, e)
		}
	}()
	if err := p.Save(7*vg.Inch, 4.5*vg.Inch, path); err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	g.pngs = append(g.pngs, path)
	return nil
}

func (g *gen) run(date string) error {
	if err := os.MkdirAll(g.pngDir, 0o755); err != nil {
		return err
	}
	g.p("## Generated figures (%s)\n\n", g.script)
	g.p("Generated by `%s`", g.script)
	if date != "" {
		g.p(" on %s", date)
	}
	g.p(". Do not edit by hand: rerun the script. One run, medians; the machine is shared, so compare ratios within a run.\n\n")
	g.p("Machine: %s", machineLine(g.res))
	g.p("\n\n")
	if g.res.machine != "" {
		g.p("    %s\n\n", strings.ReplaceAll(g.res.machine, "\n", "\n    "))
	}
	if len(g.res.commands) > 0 {
		g.p("Commands:\n\n")
		for _, c := range g.res.commands {
			g.p("    %s\n", c[1])
		}
		g.p("\n")
	}
	seen := map[string]bool{}
	for _, b := range append(append([]string{}, knownOrder...), g.res.order...) {
		recs := g.res.byBench[b]
		if seen[b] || len(recs) == 0 {
			continue
		}
		seen[b] = true
		var err error
		switch b {
		case "sampler":
			err = g.sampler(recs)
		case "noise":
			err = g.noise(recs)
		case "broadcast":
			err = g.broadcast(recs)
		case "e2e":
			err = g.e2e(recs)
		case "step":
			g.step(recs)
		case "torch":
			err = g.torch(recs)
		case "serve":
			err = g.serve(recs)
		case "prefix":
			err = g.prefix(recs)
		case "pool-e2e":
			err = g.poolE2E(recs)
		case "plain-greedy":
			err = g.plainGreedy(recs)
		case "e2e-path":
			err = g.pathE2E(recs)
		case "launch":
			err = g.launch(recs)
		case "portable":
			err = g.portable(recs)
		default:
			g.p("### %s\n\n", b)
			g.generic(recs)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func machineLine(res *results) string {
	var cpu, cores, gov string
	for _, b := range res.order {
		for _, r := range res.byBench[b] {
			if cpu == "" {
				cpu = r.str("cpu")
			}
			if cores == "" {
				cores = r.str("cores")
			}
			if gov == "" {
				gov = r.str("go")
			}
		}
	}
	parts := []string{}
	if cpu != "" {
		parts = append(parts, "`"+cpu+"`")
	}
	if cores != "" {
		parts = append(parts, cores+" cores")
	}
	if gov != "" {
		parts = append(parts, gov)
	}
	if len(parts) == 0 {
		return "unknown"
	}
	return strings.Join(parts, ", ")
}

// quotedPyTorch holds PyTorch figures measured earlier on this machine with
// PyTorch 1.13 (vLLM's CPU sampling path, vocab 100352; docs/benchmarks.md
// lists them under Targets), used when no pytorch lines were measured.
var quotedPyTorch = map[string]float64{
	"plain/32": 37.7,
	"topk/32":  54.8,
	"topp/32":  316,
	"plain/1":  1.31,
}

func fmtMS(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case v >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	return strconv.FormatFloat(v, 'f', 3, 64)
}

func fmtRatio(v float64) string {
	if v >= 10 {
		return strconv.FormatFloat(v, 'f', 0, 64) + "×"
	}
	return strconv.FormatFloat(v, 'f', 1, 64) + "×"
}

// series name of a sampler line: fast/pool, fast/inline, reference, pytorch.
func samplerSeries(r record) string {
	switch impl := r.str("impl"); impl {
	case "fast":
		return "fast/" + r.str("noise")
	default:
		return impl
	}
}

func uniqInts(m map[int]bool) []int {
	out := make([]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Ints(out)
	return out
}

// samplerKey names one sampler measurement.
type samplerKey struct {
	vocab, batch int
	mode, series string
}

// samplerData holds the sampler lines' median ms by vocab, batch, mode and
// series (later lines win).
type samplerData struct {
	ms         map[samplerKey]float64
	vocabs     []int
	modes      []string // in first-seen order
	series     []string // fast/pool, fast/inline, reference, pytorch, then the rest as seen
	measuredPT bool     // some lines are PyTorch's, measured in this run
}

// collectSampler gathers the lines that carry a median_ms.
func collectSampler(recs []record) *samplerData {
	d := &samplerData{ms: map[samplerKey]float64{}}
	vocabs := map[int]bool{}
	seenMode, seenSeries := map[string]bool{}, map[string]bool{}
	for _, r := range recs {
		v, ok := r.num("median_ms")
		if !ok {
			continue
		}
		vocab, _ := r.num("vocab")
		batch, _ := r.num("batch")
		s, mode := samplerSeries(r), r.str("mode")
		if s == "pytorch" {
			d.measuredPT = true
		}
		d.ms[samplerKey{int(vocab), int(batch), mode, s}] = v
		vocabs[int(vocab)] = true
		if !seenMode[mode] {
			seenMode[mode] = true
			d.modes = append(d.modes, mode)
		}
		if !seenSeries[s] {
			seenSeries[s] = true
			d.series = append(d.series, s)
		}
	}
	d.vocabs = uniqInts(vocabs)
	pref := map[string]int{"fast/pool": 0, "fast/inline": 1, "reference": 2, "pytorch": 3}
	sort.SliceStable(d.series, func(i, j int) bool {
		pi, ok1 := pref[d.series[i]]
		pj, ok2 := pref[d.series[j]]
		if !ok1 {
			pi = 9
		}
		if !ok2 {
			pj = 9
		}
		return pi < pj
	})
	return d
}

// batches lists the batch sizes measured at vocab.
func (d *samplerData) batches(vocab int) []int {
	set := map[int]bool{}
	for k := range d.ms {
		if k.vocab == vocab {
			set[k.batch] = true
		}
	}
	return uniqInts(set)
}

// quoted reports whether vocab's PyTorch figures are quotedPyTorch's: none
// were measured, and the quoted ones are for vocab 100352.
func (d *samplerData) quoted(vocab int) bool { return !d.measuredPT && vocab == 100352 }

func (g *gen) sampler(recs []record) error {
	d := collectSampler(recs)
	g.p("### Sampler: median ms per call, one thread\n\n")
	g.p("`fast/pool`: the fast sampler with pre-filled pool noise; `fast/inline`: it computes its noise; `reference`: the softmax Reference. The × columns are the reference's (and PyTorch's) time over fast/pool.")
	if d.measuredPT {
		g.p(" `pytorch`: `scripts/vllm_sampler_bench.py`, vLLM's CPU sampling path, measured in this run.\n\n")
	} else {
		g.p(" PyTorch was not installed for this run: the PyTorch column quotes figures measured earlier on this machine with PyTorch 1.13 (vLLM's CPU sampling path, vocab 100352), marked *quoted*; blank where none was measured.\n\n")
	}
	for _, vocab := range d.vocabs {
		batches := d.batches(vocab)
		g.p("Vocab %d:\n\n", vocab)
		g.samplerTable(d, vocab, batches)
		// One plot per mode.
		for _, mode := range d.modes {
			if err := g.samplerPlot(d, vocab, mode, batches); err != nil {
				return err
			}
		}
		for _, mode := range d.modes {
			name := fmt.Sprintf("sampler-%s-v%d.png", mode, vocab)
			if g.wrote(name) {
				g.link(name, "sampler "+mode)
			}
		}
	}
	return nil
}

// samplerTable writes vocab's table: a row per mode and batch with a
// figure, a column per series, then the reference's and PyTorch's ratios
// to fast/pool.
func (g *gen) samplerTable(d *samplerData, vocab int, batches []int) {
	hdr := []string{"mode", "batch"}
	hdr = append(hdr, d.series...)
	hasPT := d.measuredPT || vocab == 100352
	if d.quoted(vocab) {
		hdr = append(hdr, "pytorch (quoted)")
	}
	hdr = append(hdr, "reference ×")
	if hasPT {
		hdr = append(hdr, "pytorch ×")
	}
	g.p("| %s |\n|%s\n", strings.Join(hdr, " | "), strings.Repeat("---|", len(hdr)))
	for _, mode := range d.modes {
		for _, b := range batches {
			if row, ok := d.tableRow(vocab, b, mode, hasPT); ok {
				g.p("| %s |\n", strings.Join(row, " | "))
			}
		}
	}
	g.p("\n")
}

// tableRow is samplerTable's row for one mode and batch, false if no
// series has a figure there.
func (d *samplerData) tableRow(vocab, b int, mode string, hasPT bool) ([]string, bool) {
	fast, okFast := d.ms[samplerKey{vocab, b, mode, "fast/pool"}]
	row := []string{mode, strconv.Itoa(b)}
	found := false
	for _, s := range d.series {
		if v, ok := d.ms[samplerKey{vocab, b, mode, s}]; ok {
			row = append(row, fmtMS(v))
			found = true
		} else {
			row = append(row, "")
		}
	}
	if !found {
		return nil, false
	}
	pt, okPT := d.ms[samplerKey{vocab, b, mode, "pytorch"}]
	if d.quoted(vocab) {
		pt, okPT = quotedPyTorch[mode+"/"+strconv.Itoa(b)]
		if okPT {
			row = append(row, fmtMS(pt)+" *quoted*")
		} else {
			row = append(row, "")
		}
	}
	if ref, ok := d.ms[samplerKey{vocab, b, mode, "reference"}]; ok && okFast && fast > 0 {
		row = append(row, fmtRatio(ref/fast))
	} else {
		row = append(row, "")
	}
	if hasPT {
		if okPT && okFast && fast > 0 {
			row = append(row, fmtRatio(pt/fast))
		} else {
			row = append(row, "")
		}
	}
	return row, true
}

// samplerPlot saves sampler-MODE-vVOCAB.png, ms against batch with a line
// per series (and the quoted PyTorch points), unless nothing was measured.
func (g *gen) samplerPlot(d *samplerData, vocab int, mode string, batches []int) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("sampler %s, vocab %d: median ms per call", mode, vocab)
	p.X.Label.Text = "batch"
	p.Y.Label.Text = "ms (log scale)"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Legend.Top = false // bottom right: below the slow lines
	p.Legend.Left = false
	var args []any
	for _, s := range d.series {
		var pts plotter.XYs
		for _, b := range batches {
			if v, ok := d.ms[samplerKey{vocab, b, mode, s}]; ok && v > 0 {
				pts = append(pts, plotter.XY{X: float64(b), Y: v})
			}
		}
		if len(pts) > 0 {
			args = append(args, s, pts)
		}
	}
	if d.quoted(vocab) {
		if err := addQuotedPyTorch(p, mode, batches); err != nil {
			return err
		}
	}
	if len(args) == 0 {
		return nil
	}
	if err := plotutil.AddLinePoints(p, args...); err != nil {
		return err
	}
	// Explicit ranges: gonum's log ticks panic on a degenerate one.
	lo, hi := d.msRange(vocab, mode, batches)
	p.Y.Min, p.Y.Max = lo/2, hi*2
	p.X.Min, p.X.Max = 0, float64(batches[len(batches)-1])*1.05+1
	return g.save(p, fmt.Sprintf("sampler-%s-v%d.png", mode, vocab))
}

// addQuotedPyTorch adds quotedPyTorch's points for mode as red dots.
func addQuotedPyTorch(p *plot.Plot, mode string, batches []int) error {
	var pts plotter.XYs
	for _, b := range batches {
		if v, ok := quotedPyTorch[mode+"/"+strconv.Itoa(b)]; ok {
			pts = append(pts, plotter.XY{X: float64(b), Y: v})
		}
	}
	if len(pts) == 0 {
		return nil
	}
	sc, err := plotter.NewScatter(pts)
	if err != nil {
		return err
	}
	sc.Color = color.RGBA{R: 200, A: 255}
	sc.Radius = vg.Points(4)
	p.Add(sc)
	p.Legend.Add("pytorch 1.13 (quoted, measured earlier)", sc)
	return nil
}

// msRange returns the smallest and largest positive figure of the plot of
// mode at vocab, quoted PyTorch points included.
func (d *samplerData) msRange(vocab int, mode string, batches []int) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, b := range batches {
		for _, s := range append(append([]string{}, d.series...), "quoted") {
			v, ok := d.ms[samplerKey{vocab, b, mode, s}]
			if s == "quoted" && d.quoted(vocab) {
				v, ok = quotedPyTorch[mode+"/"+strconv.Itoa(b)]
			}
			if ok && v > 0 {
				lo, hi = math.Min(lo, v), math.Max(hi, v)
			}
		}
	}
	return lo, hi
}

func (g *gen) wrote(name string) bool {
	for _, p := range g.pngs {
		if filepath.Base(p) == name {
			return true
		}
	}
	return false
}

// label joins a line's string fields other than the machine's.
func label(r record, skip map[string]bool) string {
	var parts []string
	for _, k := range r.keys {
		if skip[k] || k == "cpu" || k == "go" || k == "bench" || k == "kind" {
			continue
		}
		if s, ok := r.vals[k].(string); ok && s != "" {
			parts = append(parts, s)
		}
	}
	return strings.Join(parts, "/")
}

// noise: a generic table and a bar chart of the per-value times: the
// median of lines whose "unit" names ns per value, else the first numeric
// field named *ns_per_value* (targets aside).
func (g *gen) noise(recs []record) error {
	g.p("### Noise generation\n\n")
	g.generic(recs)
	var vals plotter.Values
	var labels []string
	field := ""
	for _, r := range recs {
		v, ok := r.num("median")
		if !ok || !strings.Contains(r.str("unit"), "ns_per_value") {
			continue
		}
		field = r.str("unit")
		vals = append(vals, v)
		labels = append(labels, noiseLabel(r))
	}
	if len(vals) == 0 {
		for _, r := range recs {
			for _, k := range r.keys {
				if v, ok := r.num(k); ok && strings.Contains(k, "ns_per_value") && !strings.HasPrefix(k, "target") {
					field = k
					vals = append(vals, v)
					labels = append(labels, noiseLabel(r))
					break
				}
			}
		}
	}
	if len(vals) == 0 {
		return nil
	}
	p := plot.New()
	p.Title.Text = "noise generation: median " + field
	p.Y.Label.Text = "ns per value"
	bars, err := plotter.NewBarChart(vals, vg.Points(24))
	if err != nil {
		return err
	}
	bars.Color = plotutil.Color(0)
	p.Add(bars)
	p.NominalX(labels...)
	var at plotter.XYs
	var text []string
	for i, v := range vals {
		at = append(at, plotter.XY{X: float64(i), Y: v})
		text = append(text, strconv.FormatFloat(v, 'g', 3, 64))
	}
	if lb, err := plotter.NewLabels(plotter.XYLabels{XYs: at, Labels: text}); err == nil {
		for i := range lb.TextStyle {
			lb.TextStyle[i].XAlign = -0.5
			lb.TextStyle[i].YAlign = 0
		}
		p.Add(lb)
	}
	if err := g.save(p, "noise.png"); err != nil {
		return err
	}
	g.link("noise.png", "noise ns per value")
	return nil
}

func noiseLabel(r record) string {
	l := r.str("case")
	if l == "" {
		l = label(r, map[string]bool{"unit": true})
	}
	if n, ok := r.num("producers"); ok && n != 1 {
		l += fmt.Sprintf(" ×%g", n)
	}
	return l
}

// step: a short table when the lines carry the overhead and floor fields,
// else the generic one.
func (g *gen) step(recs []record) {
	if !recs[0].has("overhead_p50_us") {
		g.p("### Step overhead\n\n")
		g.generic(recs)
		return
	}
	r0 := recs[0]
	g.p("### Coordinator overhead per step vs the raw TCP fan-out floor\n\n")
	g.p("Batch %s, vocab %s, %s tokens, forward %s ms. Overhead is rank 0's step time minus forward and sampling; the floor is the raw TCP fan-out to N−1 followers in the same run.\n\n",
		r0.str("batch"), r0.str("vocab"), r0.str("tokens"), r0.str("forward_time_ms"))
	g.p("| TP | steps | overhead p50 µs | p90 | p99 | floor p50 µs | floor p99 µs | overhead p50 / floor p50 | target | met |\n|---|---|---|---|---|---|---|---|---|---|\n")
	f := func(r record, k string) string {
		v, ok := r.num(k)
		if !ok {
			return ""
		}
		if v >= 10 {
			return strconv.FormatFloat(v, 'f', 0, 64)
		}
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	for _, r := range recs {
		g.p("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.str("nproc"), r.str("steps"),
			f(r, "overhead_p50_us"), f(r, "overhead_p90_us"), f(r, "overhead_p99_us"),
			f(r, "floor_p50_us"), f(r, "floor_p99_us"), f(r, "overhead_p50_over_floor_p50"),
			f(r, "target_ratio"), r.str("target_met"))
	}
	g.p("\n")
}

// bcKey names one broadcast measurement: transport and follower count.
type bcKey struct {
	transport string
	n         int
}

// bcData holds the broadcast lines' figures by transport and followers.
type bcData struct {
	p50, p99, lost    map[bcKey]float64
	followers         []int
	payload, interval string // of the last line
	gloo              bool   // some line is gloo's
}

// collectBroadcast gathers the broadcast lines (later lines win) but
// those of NATS with a MAC (--mac), which would overwrite NATS's.
func collectBroadcast(recs []record) *bcData {
	d := &bcData{p50: map[bcKey]float64{}, p99: map[bcKey]float64{}, lost: map[bcKey]float64{}}
	ns := map[int]bool{}
	for _, r := range recs {
		if r.str("mac") == "true" {
			continue
		}
		n, _ := r.num("followers")
		k := bcKey{r.str("transport"), int(n)}
		ns[int(n)] = true
		d.p50[k], _ = r.num("p50_us")
		d.p99[k], _ = r.num("p99_us")
		d.lost[k], _ = r.num("lost")
		d.payload, d.interval = r.str("payload"), r.str("interval_us")
		d.gloo = d.gloo || k.transport == "gloo"
	}
	d.followers = uniqInts(ns)
	return d
}

// overTCP is a transport's p50 and p99 over tcp's for n followers, blank
// without tcp.
func (d *bcData) overTCP(transport string, n int) (r50, r99 string) {
	k, tk := bcKey{transport, n}, bcKey{"tcp", n}
	if _, ok := d.p50[k]; !ok {
		return "", ""
	}
	if d.p50[tk] > 0 {
		r50 = fmtRatio(d.p50[k] / d.p50[tk])
	}
	if d.p99[tk] > 0 {
		r99 = fmtRatio(d.p99[k] / d.p99[tk])
	}
	return r50, r99
}

// bcCell is m[k] rounded, blank when k was not measured.
func bcCell(m map[bcKey]float64, k bcKey) string {
	if v, ok := m[k]; ok {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return ""
}

// broadcast writes the broadcast table, with gloo's columns when a line
// has them (bench broadcast runs gloo when PyTorch is installed).
func (g *gen) broadcast(recs []record) error {
	d := collectBroadcast(recs)
	g.p("### Broadcast fan-out: publish-to-receive µs, %s-byte messages every %s µs\n\n", d.payload, d.interval)
	if d.gloo {
		g.p("| followers | NATS p50 | NATS p99 | TCP p50 | TCP p99 | gloo p50 | gloo p99 | p50 NATS/TCP | p99 NATS/TCP | p50 gloo/TCP | p99 gloo/TCP | lost (NATS/TCP/gloo) |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	} else {
		g.p("| followers | NATS p50 | NATS p99 | TCP p50 | TCP p99 | p50 NATS/TCP | p99 NATS/TCP | lost (NATS/TCP) |\n|---|---|---|---|---|---|---|---|\n")
	}
	for _, n := range d.followers {
		nk, tk, gk := bcKey{"nats", n}, bcKey{"tcp", n}, bcKey{"gloo", n}
		r50, r99 := d.overTCP("nats", n)
		if !d.gloo {
			g.p("| %d | %.0f | %.0f | %.0f | %.0f | %s | %s | %.0f / %.0f |\n", n, d.p50[nk], d.p99[nk], d.p50[tk], d.p99[tk], r50, r99, d.lost[nk], d.lost[tk])
			continue
		}
		g50, g99 := d.overTCP("gloo", n)
		g.p("| %d | %.0f | %.0f | %.0f | %.0f | %s | %s | %s | %s | %s | %s | %.0f / %.0f / %s |\n", n, d.p50[nk], d.p99[nk], d.p50[tk], d.p99[tk],
			bcCell(d.p50, gk), bcCell(d.p99, gk), r50, r99, g50, g99, d.lost[nk], d.lost[tk], bcCell(d.lost, gk))
	}
	g.p("\nTarget: at 8 followers NATS p50 ≤ 1.5× and p99 ≤ 2× the raw TCP fan-out.")
	if d.gloo {
		g.p(" gloo is torch.distributed's broadcast (a binomial tree), for comparison; no target.")
	}
	g.p("\n\n")
	return g.broadcastPlot(d)
}

// broadcastPlot saves and links broadcast.png, p50 and p99 against the
// follower count for NATS, TCP and gloo, unless none was measured.
func (g *gen) broadcastPlot(d *bcData) error {
	p := plot.New()
	p.Title.Text = "broadcast fan-out: publish-to-receive latency"
	p.X.Label.Text = "follower processes"
	p.Y.Label.Text = "µs"
	p.Legend.Top = true
	p.Legend.Left = true
	var args []any
	for _, s := range []struct {
		name string
		m    map[bcKey]float64
		tr   string
	}{{"NATS p50", d.p50, "nats"}, {"NATS p99", d.p99, "nats"}, {"TCP p50", d.p50, "tcp"}, {"TCP p99", d.p99, "tcp"},
		{"gloo p50", d.p50, "gloo"}, {"gloo p99", d.p99, "gloo"}} {
		var pts plotter.XYs
		for _, n := range d.followers {
			if v, ok := s.m[bcKey{s.tr, n}]; ok {
				pts = append(pts, plotter.XY{X: float64(n), Y: v})
			}
		}
		if len(pts) > 0 {
			args = append(args, s.name, pts)
		}
	}
	if len(args) == 0 {
		return nil
	}
	if err := plotutil.AddLinePoints(p, args...); err != nil {
		return err
	}
	if err := g.save(p, "broadcast.png"); err != nil {
		return err
	}
	g.link("broadcast.png", "broadcast latency")
	return nil
}

func (g *gen) e2e(recs []record) error {
	var combos, stages []record
	for _, r := range recs {
		switch r.str("kind") {
		case "combo":
			combos = append(combos, r)
		case "stage":
			stages = append(stages, r)
		}
	}
	if len(combos) == 0 {
		g.p("### End to end\n\n")
		g.generic(recs)
		return nil
	}
	c0 := combos[0]
	g.p("### End to end: output tokens/s per combination\n\n")
	g.p("TP %s, batch %s, %s tokens per request, vocab %s, %s ms synthetic forward", c0.str("nproc"), c0.str("batch"), c0.str("tokens"), c0.str("vocab"), c0.str("forward_time_ms"))
	if c := c0.str("cpus"); c != "" {
		g.p(", whole launch under `taskset -c %s`", c)
	}
	g.p(". One run per combination.\n\n")
	g.p("| combination (noise+sampling+ranks) | output tokens/s | total s | vs baseline |\n|---|---|---|---|\n")
	var vals plotter.Values
	var labels []string
	for _, r := range combos {
		tps, _ := r.num("output_tokens_per_s")
		tot, _ := r.num("total_s")
		vs := ""
		if v, ok := r.num("vs_baseline"); ok {
			vs = strconv.FormatFloat(v, 'f', 2, 64)
		}
		g.p("| %s | %.1f | %.2f | %s |\n", r.str("combo"), tps, tot, vs)
		vals = append(vals, tps)
		labels = append(labels, r.str("combo"))
	}
	g.p("\n")
	if len(stages) > 0 {
		g.e2eStages(stages)
	}
	return g.e2ePlot(vals, labels)
}

// e2eStages writes the table of per-stage ratios.
func (g *gen) e2eStages(stages []record) {
	g.p("| stage | only it on, vs baseline | full, vs full with only it off |\n|---|---|---|\n")
	for _, r := range stages {
		a, b := "", ""
		if v, ok := r.num("only_on_vs_baseline"); ok {
			a = strconv.FormatFloat(v, 'f', 2, 64)
		}
		if v, ok := r.num("full_vs_only_off"); ok {
			b = strconv.FormatFloat(v, 'f', 2, 64)
		}
		g.p("| %s: %s -> %s | %s | %s |\n", r.str("stage"), r.str("off"), r.str("on"), a, b)
	}
	g.p("\n")
}

// e2ePlot saves and links e2e.png, a bar of output tokens/s per
// combination.
func (g *gen) e2ePlot(vals plotter.Values, labels []string) error {
	p := plot.New()
	p.Title.Text = "end to end: output tokens/s per combination"
	p.Y.Label.Text = "output tokens/s"
	bars, err := plotter.NewBarChart(vals, vg.Points(24))
	if err != nil {
		return err
	}
	bars.Color = plotutil.Color(1)
	p.Add(bars)
	p.NominalX(labels...)
	p.X.Tick.Label.Rotation = math.Pi / 6
	p.X.Tick.Label.XAlign = -0.9
	if err := g.save(p, "e2e.png"); err != nil {
		return err
	}
	g.link("e2e.png", "e2e tokens/s")
	return nil
}

// generic prints every field of the lines as a table, machine fields aside.
func (g *gen) generic(recs []record) {
	var cols []string
	seen := map[string]bool{"cpu": true, "cores": true, "go": true, "bench": true}
	for _, r := range recs {
		for _, k := range r.keys {
			if !seen[k] {
				seen[k] = true
				cols = append(cols, k)
			}
		}
	}
	if len(cols) == 0 {
		return
	}
	g.p("| %s |\n|%s\n", strings.Join(cols, " | "), strings.Repeat("---|", len(cols)))
	for _, r := range recs {
		row := make([]string, len(cols))
		for i, c := range cols {
			switch v := r.vals[c].(type) {
			case float64:
				if v == math.Trunc(v) && math.Abs(v) < 1e15 {
					row[i] = strconv.FormatFloat(v, 'f', 0, 64)
				} else {
					row[i] = strconv.FormatFloat(v, 'g', 4, 64)
				}
			case nil:
			case string:
				row[i] = v
			default:
				b, _ := json.Marshal(v)
				row[i] = string(b)
			}
			row[i] = strings.ReplaceAll(row[i], "|", `\|`)
		}
		g.p("| %s |\n", strings.Join(row, " | "))
	}
	g.p("\n")
}

// splice replaces the text between the markers, or appends the markers and
// the section at the end of doc.
func splice(doc, section string) (string, error) {
	b := strings.Index(doc, beginMarker)
	e := strings.Index(doc, endMarker)
	body := beginMarker + "\n" + strings.TrimRight(section, "\n") + "\n" + endMarker
	switch {
	case b < 0 && e < 0:
		if !strings.HasSuffix(doc, "\n") {
			doc += "\n"
		}
		return doc + "\n" + body + "\n", nil
	case b < 0 || e < 0 || e < b:
		return "", errors.New("bench.sh markers are unbalanced")
	case strings.Count(doc, beginMarker) > 1 || strings.Count(doc, endMarker) > 1:
		return "", errors.New("bench.sh markers appear more than once")
	}
	return doc[:b] + body + doc[e+len(endMarker):], nil
}

func run(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("benchplot", flag.ContinueOnError)
	fs.SetOutput(stderr)
	resultsDir := fs.String("results", "", "directory of *.jsonl results (required)")
	pngDir := fs.String("png-dir", "", "directory for the PNGs (default: --results)")
	docs := fs.String("docs", "", "markdown file whose bench.sh section is replaced")
	mdOut := fs.String("md-out", "", "write the section here (default: RESULTS/section.md when --docs is empty)")
	date := fs.String("date", "", "date shown in the section")
	script := fs.String("script", "scripts/bench.sh", "the script named as the section's source")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *resultsDir == "" {
		fs.Usage()
		return errors.New("--results is required")
	}
	if *pngDir == "" {
		*pngDir = *resultsDir
	}
	res, err := load(*resultsDir)
	if err != nil {
		return err
	}
	target := *mdOut
	if *docs != "" {
		target = *docs
	} else if target == "" {
		target = filepath.Join(*resultsDir, "section.md")
	}
	g := &gen{res: res, pngDir: *pngDir, mdDir: filepath.Dir(target), script: *script}
	if err := g.run(*date); err != nil {
		return err
	}
	section := g.md.String()
	if *docs != "" {
		old, err := os.ReadFile(*docs)
		if err != nil {
			return err
		}
		out, err := splice(string(old), section)
		if err != nil {
			return fmt.Errorf("%s: %w", *docs, err)
		}
		if err := os.WriteFile(*docs, []byte(out), 0o644); err != nil {
			return err
		}
	} else if err := os.WriteFile(target, []byte(section), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "benchplot: wrote %s and %d PNGs in %s\n", target, len(g.pngs), *pngDir)
	return nil
}

func main() {
	if err := run(os.Args[1:], os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "benchplot:", err)
		}
		os.Exit(2)
	}
}
