package structured

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/internal/grammar"
)

func validOptions() Options {
	return Options{Self: "/bin/tpcoord", NProc: 4, Batch: 32, Vocab: 100352, ForwardTime: 20 * time.Millisecond,
		Tokens: 64, Tokenizer: "tiktoken:cl100k_base", EOS: 100257, Rounds: 5, Timeout: time.Minute}
}

func TestStructuredValidateNamesTheFlag(t *testing.T) {
	if err := validOptions().Validate(); err != nil {
		t.Fatalf("valid options: %v", err)
	}
	for _, tc := range []struct {
		flag string
		edit func(*Options)
	}{
		{"--nproc", func(o *Options) { o.NProc = 0 }},
		{"--batch", func(o *Options) { o.Batch = 0 }},
		{"--vocab", func(o *Options) { o.Vocab = 8 }},
		{"--forward-time", func(o *Options) { o.ForwardTime = -time.Millisecond }},
		{"--tokens", func(o *Options) { o.Tokens = 0 }},
		{"--tokenizer", func(o *Options) { o.Tokenizer = "" }},
		{"--eos", func(o *Options) { o.EOS = -1 }},
		{"--eos", func(o *Options) { o.EOS = 100352 }},
		{"--rounds", func(o *Options) { o.Rounds = 0 }},
		{"--timeout", func(o *Options) { o.Timeout = 0 }},
		{"--schema", func(o *Options) { o.Schema = filepath.Join(t.TempDir(), "missing.json") }},
	} {
		o := validOptions()
		tc.edit(&o)
		if err := o.Validate(); err == nil || !strings.HasPrefix(err.Error(), tc.flag+":") {
			t.Errorf("%s: error %v, want one naming it", tc.flag, err)
		}
	}
	o := validOptions()
	o.Self = ""
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "Self") {
		t.Errorf("no Self: %v", err)
	}
}

// A --schema that does not compile is refused naming the flag, the file
// and the keyword; one that compiles is what the constrained rows get.
func TestStructuredSchemaFile(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"type":"integer","multipleOf":3}`), 0o644); err != nil {
		t.Fatal(err)
	}
	o := validOptions()
	o.Schema = bad
	if err := o.Validate(); err == nil || !strings.HasPrefix(err.Error(), "--schema: "+bad) || !strings.Contains(err.Error(), "multipleOf") {
		t.Errorf("a schema that does not compile: %v", err)
	}
	good := filepath.Join(dir, "good.json")
	if err := os.WriteFile(good, []byte(`{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	o.Schema = good
	b, err := o.schema()
	if err != nil || !bytes.Contains(b, []byte(`"required":["a"]`)) || o.schemaName() != good {
		t.Errorf("schema() = %s, %v; name %s", b, err, o.schemaName())
	}
	if o.Schema = ""; o.schemaName() != "built-in" {
		t.Errorf("built-in schema's name: %s", o.schemaName())
	}
}

// The built-in schema is internal/grammar's testdata/order.schema.json,
// whose compile and mask times its benchmarks measure, and it compiles.
func TestStructuredBuiltInSchemaIsTheBenchmarks(t *testing.T) {
	want, err := os.ReadFile("../../../../../internal/grammar/testdata/order.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(defaultSchema, want) {
		t.Error("schema.json differs from internal/grammar/testdata/order.schema.json")
	}
	g, err := grammar.FromJSONSchema(defaultSchema)
	if err == nil {
		_, err = grammar.Compile(g, grammar.DefaultLimits())
	}
	if err != nil {
		t.Errorf("the built-in schema: %v", err)
	}
}

func TestStructuredRequests(t *testing.T) {
	o := validOptions()
	unc, con := request(o, nil, 2, 3), request(o, defaultSchema, 2, 3)
	if !unc.IgnoreEOS || unc.StructuredOutputs != nil || unc.MaxTokens != 64 {
		t.Errorf("unconstrained: %+v", unc.Params)
	}
	if con.IgnoreEOS || con.StructuredOutputs == nil || !bytes.Equal(con.StructuredOutputs.JSON, defaultSchema) {
		t.Errorf("constrained: %+v", con.Params)
	}
	for _, r := range []*api.GenerateRequest{unc, con} {
		if err := r.Params.Validate(o.Vocab); err != nil {
			t.Errorf("params: %v", err)
		}
		if r.Temperature != Temperature || r.Seed == nil {
			t.Errorf("temperature %v, seed %v", r.Temperature, r.Seed)
		}
	}
	// Every request of a run has a seed of its own.
	seen := map[uint64]bool{}
	for round := -1; round < 3; round++ {
		for i := range 32 {
			for _, schema := range [][]byte{nil, defaultSchema} {
				s := *request(o, schema, round, i).Seed
				if seen[s] {
					t.Fatalf("seed %d twice (round %d, request %d)", s, round, i)
				}
				seen[s] = true
			}
		}
	}
}

func TestStructuredLaunchArgs(t *testing.T) {
	got := strings.Join(validOptions().launchArgs(), " ")
	for _, want := range []string{"--nproc 4", "--vocab 100352", "--forward-time 20ms", "--max-batch 32",
		"--tokenizer tiktoken:cl100k_base", "--eos 100257"} {
		if !strings.Contains(got, want) {
			t.Errorf("launch args %q lack %q", got, want)
		}
	}
}

func step(start time.Time, forward, sample, total float64) api.StepTiming {
	return api.StepTiming{Start: start, Rows: 2, ForwardMs: forward, SampleMs: sample, TotalMs: total}
}

func TestStructuredBatchResult(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	steps := []api.StepTiming{step(t0, 20, 1, 22), step(t0.Add(time.Millisecond), 20, 3, 24), step(t0.Add(2*time.Millisecond), 20, 8, 30)}
	b := batchOutcome{tokens: [][]int32{{1, 2, 3}, {4}, {5, 6}}, stopped: 1, jsonValid: 1, elapsed: 0.5, steps: steps}
	r := batchResult("batch", 3, KindConstrained, b)
	if r.Kind != "batch" || r.Round != 3 || r.Batch != KindConstrained || r.Requests != 3 || r.OutputTokens != 6 ||
		r.MinTokens != 1 || r.Stopped != 1 || r.JSONValid != 1 || r.TokensPerS != 12 {
		t.Errorf("line %+v", r)
	}
	if m := r.Step; m == nil || m.Steps != 3 || m.Sample != 3 || m.Total != 24 || m.Forward != 20 {
		t.Errorf("median phases %+v", m)
	}
	if m := r.StepMean; m == nil || m.Sample != 4 || m.Total != 76.0/3 {
		t.Errorf("mean phases %+v", m)
	}
	if r := batchResult("batch", 0, KindUnconstrained, batchOutcome{tokens: [][]int32{{1}}}); r.Step != nil || r.TokensPerS != 0 {
		t.Errorf("no steps, no time: %+v", r)
	}
	// A batch's steps are those that started in its window.
	in := stepsIn(steps, t0.Add(time.Millisecond).UnixNano(), t0.Add(2*time.Millisecond).UnixNano())
	if len(in) != 1 || in[0].SampleMs != 3 {
		t.Errorf("stepsIn = %+v", in)
	}
}

func TestStructuredSummarize(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	batch := func(kind string, round int, constrained bool, tokens int, sample float64) BatchResult {
		b := batchOutcome{tokens: [][]int32{make([]int32, tokens)}, elapsed: 1, steps: []api.StepTiming{step(t0, 20, sample, 21)}}
		return batchResult(kind, round, kindName(constrained), b)
	}
	batches := []BatchResult{
		batch("warmup", -1, true, 1, 50), // not counted
		batch("batch", 0, false, 100, 1), batch("batch", 0, true, 90, 2),
		batch("batch", 1, true, 99, 4), batch("batch", 1, false, 100, 1),
		batch("batch", 2, false, 200, 1), batch("batch", 2, true, 196, 3),
	}
	rounds := []RoundResult{
		roundResult(0, KindUnconstrained, batches[1], batches[2]),
		roundResult(1, KindConstrained, batches[4], batches[3]),
		roundResult(2, KindUnconstrained, batches[5], batches[6]),
	}
	if r := rounds[1]; r.Ratio != 0.99 || r.First != KindConstrained || r.Unconstrained != 100 || r.Constrained != 99 {
		t.Errorf("round 1: %+v", r)
	}
	var s Summary
	summarize(&s, batches, rounds)
	if s.Unconstrained.Batches != 3 || s.Constrained.Batches != 3 || s.Unconstrained.TokensPerS != 100 || s.Constrained.TokensPerS != 99 {
		t.Errorf("kinds: %+v, %+v", s.Unconstrained, s.Constrained)
	}
	if s.Ratio != 0.98 || len(s.RoundRatios) != 3 || s.RatioOfMedians != 0.99 || s.Target != TargetRatio || !s.TargetMet {
		t.Errorf("ratios: %+v", s)
	}
	if st := s.Constrained.Step; st == nil || st.Steps != 3 || st.Sample != 3 {
		t.Errorf("constrained steps (the warm-up's left out): %+v", st)
	}
	rounds[0].Ratio, rounds[2].Ratio = 0.9, 0.94
	summarize(&s, batches, rounds)
	if s.Ratio != 0.94 || s.TargetMet {
		t.Errorf("below the target: ratio %v, met %v", s.Ratio, s.TargetMet)
	}
	summarize(&s, nil, nil)
	if s.TargetMet || s.RoundRatios == nil {
		t.Errorf("no rounds: %+v", s)
	}
}

// The table says whether the target is met, and JSON lines are the lines.
func TestStructuredPrint(t *testing.T) {
	var s Summary
	summarize(&s, nil, []RoundResult{{Ratio: 0.5}})
	var out bytes.Buffer
	if err := printSummary(&out, s, false); err != nil || !strings.Contains(out.String(), "NOT met") {
		t.Errorf("table: %q, %v", out.String(), err)
	}
	out.Reset()
	if err := printLine(&out, RoundResult{Kind: "round", Ratio: 0.5}, true); err != nil || !strings.HasPrefix(out.String(), `{"kind":"round"`) {
		t.Errorf("JSON line: %q, %v", out.String(), err)
	}
}
