package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/respjson"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/coordinator/gateway/tokenizer"
	"github.com/tpcoord/tpcoord/internal/freeport"
	"github.com/tpcoord/tpcoord/rank/client"
)

// These tests check structured outputs (issue 38) end to end: outputs
// that end with stop are judged by an independent JSON Schema validator
// (santhosh-tekuri/jsonschema, formats asserted), by Go's regexp, or by a
// parser written here, never by the grammar code that constrained them.

// soSchema is one JSON Schema of the validity workload.
type soSchema struct{ name, schema string }

// oracleText is s's schema as the validator reads it: draft 2020-12 has
// no OpenAPI nullable, so `"nullable":true` beside a type name becomes
// that type or null.
func (s soSchema) oracleText() string {
	return regexp.MustCompile(`"type":"(\w+)","nullable":true`).ReplaceAllString(s.schema, `"type":["$1","null"]`)
}

// soSchemas are 10 schemas that together use every keyword
// docs/structured-outputs.md lists as supported. Strings are bounded
// (maxLength, pattern, format or enum) so that a model drawing random
// tokens ends most outputs; a fractional number is not (its digits are
// unbounded), so "numbers" ends less often.
var soSchemas = []soSchema{
	{"person", `{"type":"object","properties":{
		"name":{"type":"string","minLength":1,"maxLength":12},
		"age":{"type":"integer","minimum":0,"maximum":150},
		"tags":{"type":"array","items":{"enum":["a","b","c"]},"maxItems":4}},
		"required":["name","age"],"additionalProperties":false}`},
	{"nullable", `{"type":"object","properties":{
		"a":{"type":["string","null"],"maxLength":5},
		"b":{"type":"integer","nullable":true,"minimum":-5,"maximum":5},
		"c":{"type":["integer","boolean","null"],"minimum":0,"maximum":3}},
		"required":["a","b","c"],"additionalProperties":false}`},
	{"enum-const", `{"type":"object","properties":{
		"kind":{"const":"event"},
		"level":{"enum":["low","mid","high",1,2.5,null,true]},
		"detail":{"enum":[{"x":[1,"é\n"]},["a\"b"],false]},
		"version":{"const":2}},
		"required":["kind","level","version"],"additionalProperties":false}`},
	{"tuple", `{"type":"array","prefixItems":[{"type":"string","format":"date"},{"type":"integer","minimum":1,"maximum":9}],
		"items":{"type":"boolean"},"minItems":2,"maxItems":5}`},
	{"strings", `{"type":"object","properties":{
		"code":{"type":"string","pattern":"^[A-Z]{3}-[0-9]{2,4}$"},
		"word":{"type":"string","minLength":2,"maxLength":6},
		"hex":{"type":"string","pattern":"[0-9a-f]{1,8}"},
		"greek":{"type":"string","pattern":"^[α-ω]{1,3}$","maxLength":3}},
		"required":["code","word","hex"],"additionalProperties":false}`},
	{"formats", `{"type":"object","properties":{
		"id":{"type":"string","format":"uuid"},
		"day":{"type":"string","format":"date"},
		"at":{"type":"string","format":"date-time"},
		"t":{"type":"string","format":"time"},
		"ip":{"type":"string","format":"ipv4"}},
		"required":["id","day","at","t","ip"],"additionalProperties":false}`},
	{"numbers", `{"type":"object","properties":{
		"i":{"type":"integer","exclusiveMinimum":-10,"exclusiveMaximum":10},
		"big":{"type":"integer","minimum":1000000,"maximum":1000000000000},
		"neg":{"type":"integer","maximum":-3,"exclusiveMinimum":-300},
		"n":{"type":"number","minimum":-1.5,"maximum":2.25}},
		"required":["i","big","neg","n"],"additionalProperties":false}`},
	{"any-of", `{"anyOf":[
		{"type":"object","properties":{"cat":{"const":"a"},"x":{"type":"integer","minimum":0,"maximum":9}},"required":["cat","x"],"additionalProperties":false},
		{"type":"string","enum":["none","other"]},
		{"type":"array","items":{"type":"integer","minimum":0,"maximum":3},"maxItems":3}]}`},
	{"tree", `{"$defs":{"node":{"type":"object","properties":{
		"v":{"type":"integer","minimum":0,"maximum":99},
		"label":{"$ref":"#/definitions/label"},
		"kids":{"type":"array","items":{"$ref":"#/$defs/node"},"maxItems":2}},
		"required":["v"],"additionalProperties":false}},
		"definitions":{"label":{"type":"string","maxLength":4}},
		"$ref":"#/$defs/node"}`},
	{"mixed", `{"title":"mixed","description":"combinators, maps and tuples","type":"object","properties":{
		"empty":{"type":"object","additionalProperties":false},
		"note":{"allOf":[{"type":"string","maxLength":3}]},
		"count":{"oneOf":[{"type":"integer","minimum":0,"maximum":5},{"type":"string","enum":["many"]}]},
		"pair":{"type":"array","prefixItems":[{"const":1},{"type":"string","maxLength":2}],"items":false},
		"ok":{"type":"boolean"}},
		"required":["empty","extra"],"additionalProperties":{"type":"integer","minimum":0,"maximum":9}}`},
}

// soOracle compiles schema with the independent validator: draft 2020-12,
// formats asserted.
func soOracle(t *testing.T, name, schema string) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
	if err != nil {
		t.Fatalf("schema %s: %v", name, err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	if err := c.AddResource(name+".json", doc); err != nil {
		t.Fatalf("schema %s: %v", name, err)
	}
	sch, err := c.Compile(name + ".json")
	if err != nil {
		t.Fatalf("schema %s: %v", name, err)
	}
	return sch
}

// soValidates checks an output against sch: it parses with encoding/json,
// is compact (the server writes no whitespace between tokens) and
// validates.
func soValidates(sch *jsonschema.Schema) func(string) error {
	return func(out string) error {
		var v any
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			return fmt.Errorf("does not parse: %w", err)
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, []byte(out)); err != nil {
			return err
		}
		if compact.String() != out {
			return errors.New("is not compact")
		}
		inst, err := jsonschema.UnmarshalJSON(strings.NewReader(out))
		if err != nil {
			return err
		}
		return sch.Validate(inst)
	}
}

// soFullMatch checks that an output matches pattern as a whole.
func soFullMatch(pattern string) func(string) error {
	re := regexp.MustCompile(`^(?:` + pattern + `)$`)
	return func(out string) error {
		if !re.MatchString(out) {
			return fmt.Errorf("does not match %s", re)
		}
		return nil
	}
}

// soOneOf checks that an output is one of choices.
func soOneOf(choices []string) func(string) error {
	return func(out string) error {
		if !slices.Contains(choices, out) {
			return fmt.Errorf("is none of %q", choices)
		}
		return nil
	}
}

// soIsObject checks that an output parses as a JSON object.
func soIsObject(out string) error {
	var v any
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		return fmt.Errorf("does not parse: %w", err)
	}
	if _, ok := v.(map[string]any); !ok {
		return fmt.Errorf("is a %T, not an object", v)
	}
	return nil
}

// soNestedListGBNF is a grammar no regular expression can check: lists of
// digits and lists, nested to any depth.
const soNestedListGBNF = `root ::= list
list ::= "[" ( item ( "," item )* )? "]"
item ::= [0-9] | list
`

// soIsNestedList checks an output against soNestedListGBNF, by recursive
// descent.
func soIsNestedList(out string) error {
	rest, ok := soParseList(out)
	if !ok || rest != "" {
		return errors.New("is not a nested list of digits")
	}
	return nil
}

func soParseList(s string) (string, bool) {
	s, ok := strings.CutPrefix(s, "[")
	if !ok {
		return s, false
	}
	if r, ok := strings.CutPrefix(s, "]"); ok {
		return r, true
	}
	for {
		switch {
		case s != "" && s[0] >= '0' && s[0] <= '9':
			s = s[1:]
		case strings.HasPrefix(s, "["):
			if s, ok = soParseList(s); !ok {
				return s, false
			}
		default:
			return s, false
		}
		if r, ok := strings.CutPrefix(s, "]"); ok {
			return r, true
		}
		if s, ok = strings.CutPrefix(s, ","); !ok {
			return s, false
		}
	}
}

// soRequest is one constrained completion: field (response_format,
// guided_regex, …) set to value, and the check of an output that ends
// with stop.
type soRequest struct {
	group     string // what the tallies count it under
	field     string
	value     any
	seed      int64
	maxTokens int64
	check     func(string) error
}

// soOutput is what a constrained completion returned.
type soOutput struct {
	text, finish string
	ids          []int32
	err          error
}

// soJSONSchemaFormat is response_format for schema.
func soJSONSchemaFormat(name, schema string) map[string]any {
	return map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": name, "strict": true, "schema": json.RawMessage(schema)}}
}

// soPrompt is a seeded request's prompt: it differs by seed too, so that
// a model that reads its prompt (the PyTorch one) is not only drawn from
// differently.
func soPrompt(seed int64) string { return fmt.Sprintf("Reply in JSON, answer %d.", seed) }

// soComplete sends r to model as a text completion at temperature 1.
func (oj *openaiJob) soComplete(ctx context.Context, model string, r soRequest, opts ...option.RequestOption) soOutput {
	p := textPrompt(model, soPrompt(r.seed), r.seed, r.maxTokens)
	p.Temperature = openai.Float(1)
	c, err := oj.client.Completions.New(ctx, p, append(opts, option.WithJSONSet(r.field, r.value))...)
	if e := (*openai.Error)(nil); errors.As(err, &e) {
		return soOutput{err: fmt.Errorf("%d: %s", e.StatusCode, e.Message)}
	} else if err != nil {
		return soOutput{err: err}
	}
	if len(c.Choices) != 1 {
		return soOutput{err: fmt.Errorf("%d choices: %s", len(c.Choices), c.RawJSON())}
	}
	ch := c.Choices[0]
	ids, err := soTokenIDs(ch.JSON.ExtraFields)
	return soOutput{text: ch.Text, finish: string(ch.FinishReason), ids: ids, err: err}
}

// soTokenIDs reads vLLM's token_ids extension off a choice.
func soTokenIDs(extra map[string]respjson.Field) ([]int32, error) {
	f, ok := extra["token_ids"]
	if !ok {
		return nil, fmt.Errorf("the choice has no token_ids (fields %v)", slices.Collect(maps.Keys(extra)))
	}
	var ids []int32
	err := json.Unmarshal([]byte(f.Raw()), &ids)
	return ids, err
}

// soEachBounded calls f(0), …, f(n-1), at most width at a time.
func soEachBounded(n, width int, f func(i int)) {
	var wg sync.WaitGroup
	slots := make(chan struct{}, width)
	for i := range n {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			f(i)
		})
	}
	wg.Wait()
}

// soTally counts a group's outputs by how they ended, and the distinct
// outputs that ended with stop.
type soTally struct {
	stop, length int
	distinct     map[string]bool
}

// soRunChecked sends reqs, width at a time, through send; checks every
// output that ends with stop and that every other ends with length at
// max_tokens; and returns the counts by group.
func soRunChecked(t *testing.T, reqs []soRequest, width int, send func(soRequest) soOutput) map[string]*soTally {
	t.Helper()
	outs := make([]soOutput, len(reqs))
	soEachBounded(len(reqs), width, func(i int) { outs[i] = send(reqs[i]) })
	counts := map[string]*soTally{}
	for i, r := range reqs {
		o := outs[i]
		if counts[r.group] == nil {
			counts[r.group] = &soTally{distinct: map[string]bool{}}
		}
		switch {
		case o.err != nil:
			t.Errorf("%s seed %d: %v", r.group, r.seed, o.err)
		case o.finish == "stop":
			counts[r.group].stop++
			counts[r.group].distinct[o.text] = true
			if err := r.check(o.text); err != nil {
				t.Errorf("%s seed %d: output %q ended with stop and %v", r.group, r.seed, o.text, err)
			}
		case o.finish == "length":
			counts[r.group].length++
			if len(o.ids) != int(r.maxTokens) {
				t.Errorf("%s seed %d: finish_reason length after %d tokens, max_tokens %d", r.group, r.seed, len(o.ids), r.maxTokens)
			}
		default:
			t.Errorf("%s seed %d: finish_reason %q, want stop or length", r.group, r.seed, o.finish)
		}
	}
	return counts
}

// soSchemaRequests are perSchema seeded requests for each of soSchemas,
// interleaved.
func soSchemaRequests(t *testing.T, perSchema int, maxTokens int64) []soRequest {
	t.Helper()
	checks := make([]func(string) error, len(soSchemas))
	for i, s := range soSchemas {
		checks[i] = soValidates(soOracle(t, s.name, s.oracleText()))
	}
	var reqs []soRequest
	for k := range perSchema {
		for i, s := range soSchemas {
			reqs = append(reqs, soRequest{group: s.name, field: "response_format", value: soJSONSchemaFormat(s.name, s.schema),
				seed: int64(1000 + k*len(soSchemas) + i), maxTokens: maxTokens, check: checks[i]})
		}
	}
	return reqs
}

// soChoices are guided_choice's choices: one a prefix of another, several
// tokens long, not ASCII.
var soChoices = []string{"yes", "no", "maybe so", "¿quizás?", "🙂 fine", "yes please"}

// soOtherRequests are the regex, choice and grammar requests, n seeds each,
// and 2n json_object requests (free-form strings end rarely).
func soOtherRequests(n int) []soRequest {
	var reqs []soRequest
	add := func(group, field string, value any, maxTokens int64, check func(string) error) {
		seeds := n
		if group == "json_object" {
			seeds = 2 * n
		}
		for s := range seeds {
			reqs = append(reqs, soRequest{group: group, field: field, value: value, seed: int64(5000 + s), maxTokens: maxTokens, check: check})
		}
	}
	for i, re := range []string{`[a-z]{3,8}@[a-z]{2,5}\.(com|org)`, `\d{3}-\d{4}`, `[A-Z][a-z]{0,10}( [A-Z][a-z]{0,10}){0,3}`,
		`(0|[1-9][0-9]{0,2})(\.[0-9]{1,2})?%`, `[α-ω]{2,5}!?`} {
		add(fmt.Sprintf("regex %d", i), "guided_regex", re, 64, soFullMatch(re))
	}
	add("choice", "guided_choice", soChoices, 64, soOneOf(soChoices))
	greet := "root ::= greeting \" \" name \"!\"\ngreeting ::= \"hello\" | \"hi\" | \"hey\"\nname ::= [A-Z] [a-z] [a-z]? [a-z]?\n"
	add("gbnf greeting", "guided_grammar", greet, 64, soFullMatch(`(hello|hi|hey) [A-Z][a-z]{1,3}!`))
	add("gbnf nested lists", "guided_grammar", soNestedListGBNF, 256, soIsNestedList)
	add("json_object", "response_format", map[string]any{"type": "json_object"}, 256, soIsObject)
	return reqs
}

// TestStructuredValiditySynthetic: on the synthetic executor (random
// logits) with cl100k_base, 500 seeded json_schema completions over 10
// schemas that use every supported keyword: every output that ends with
// stop parses, is compact and validates against its schema (an
// independent validator), and at least 80% end with stop. guided_regex
// outputs match their expression whole, guided_choice outputs are one of
// the choices, GBNF outputs are in their grammar's language (a regular
// one, and nested lists), json_object outputs are objects. The same seed
// gives the same output, whole and streamed.
func TestStructuredValiditySynthetic(t *testing.T) {
	oj := launchHTTP(t, "", "--job", "e2e-so-synthetic", "--tokenizer", "tiktoken:cl100k_base", "--eos", strconv.Itoa(soCL100KEOS),
		"--forward-time", "2ms", "--max-batch", "32")
	ctx := testContext(t, 5*time.Minute)
	send := func(r soRequest) soOutput { return oj.soComplete(ctx, oj.info.Job, r) }

	start := time.Now()
	counts := soRunChecked(t, soSchemaRequests(t, 50, 256), 32, send)
	stops, total := 0, 0
	for _, s := range soSchemas {
		c := counts[s.name]
		t.Logf("schema %-10s stop %2d (%2d distinct) length %2d", s.name, c.stop, len(c.distinct), c.length)
		stops, total = stops+c.stop, total+c.stop+c.length
	}
	t.Logf("json_schema: %d requests in %v, %d ended with stop (%.1f%%), %d with length", total, time.Since(start).Round(time.Millisecond),
		stops, 100*float64(stops)/float64(max(total, 1)), total-stops)
	if total != 50*len(soSchemas) || stops*5 < total*4 {
		t.Errorf("%d of %d json_schema requests answered, %d ended with stop: want all 500 answered, at least 80%% with stop", total, 50*len(soSchemas), stops)
	}

	start = time.Now()
	others := soRunChecked(t, soOtherRequests(20), 32, send)
	for _, g := range slices.Sorted(maps.Keys(others)) {
		c := others[g]
		t.Logf("%-18s stop %2d (%2d distinct) length %2d", g, c.stop, len(c.distinct), c.length)
		if c.stop == 0 {
			t.Errorf("%s: no output ended with stop, so none was checked", g)
		}
	}
	t.Logf("regex, choice, grammar and json_object: %d groups in %v", len(others), time.Since(start).Round(time.Millisecond))
	soCheckSameSeed(t, oj)
}

// soCheckSameSeed sends one seeded constrained request twice and
// streamed: the same tokens and text each time.
func soCheckSameSeed(t *testing.T, oj *openaiJob) {
	t.Helper()
	ctx := testContext(t, time.Minute)
	s := soSchemas[8] // tree: recursion
	r := soRequest{field: "response_format", value: soJSONSchemaFormat(s.name, s.schema), seed: 4242, maxTokens: 256}
	first, second := oj.soComplete(ctx, oj.info.Job, r), oj.soComplete(ctx, oj.info.Job, r)
	if err := errors.Join(first.err, second.err); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(first.ids, second.ids) || first.text != second.text || first.finish != second.finish {
		t.Errorf("seed 4242 twice: %v %q (%s), then %v %q (%s): want the same", first.ids, first.text, first.finish, second.ids, second.text, second.finish)
	}
	p := textPrompt(oj.info.Job, soPrompt(r.seed), r.seed, r.maxTokens)
	p.Temperature = openai.Float(1)
	st := readCompletionStream(t, oj.client.Completions.NewStreaming(ctx, p, option.WithJSONSet(r.field, r.value)))
	if !slices.Equal(st.tokens, first.ids) || st.finish != first.finish {
		t.Errorf("seed 4242 streamed: %v (%s), whole %v (%s): want the same", st.tokens, st.finish, first.ids, first.finish)
	}
	t.Logf("seed 4242 three times: %q, %s", first.text, first.finish)
}

// TestStructuredRefusedWithoutTokenizer: a job without --tokenizer
// refuses a structured request of every kind over NATS, naming
// structured_outputs and the tokenizer, and over HTTP with 400; the
// gateway refuses a constraint that does not compile with 400 naming the
// field it came from and the problem (the schema keyword, the regular
// expression's error, the grammar's undefined rule).
func TestStructuredRefusedWithoutTokenizer(t *testing.T) {
	t.Parallel()
	oj := launchHTTP(t, "", "--job", "e2e-so-notok", "--forward-time", "1ms")
	ctx := testContext(t, 2*time.Minute)
	nc, subj := connect(t, oj.job)
	for _, so := range []api.StructuredOutputs{
		{JSON: json.RawMessage(`{"type":"integer"}`)}, {Regex: "[a-z]+"}, {Choice: []string{"a", "b"}},
		{Grammar: `root ::= "x"`}, {JSONObject: true},
	} {
		p := api.DefaultParams()
		p.StructuredOutputs = &so
		kind, _, _ := so.Kind()
		rep, err := client.Generate(ctx, nc, subj, &api.GenerateRequest{PromptTokenIDs: []int32{1, 2, 3}, MaxTokens: 8, Params: p}, nil)
		if err == nil || !strings.Contains(err.Error(), "structured_outputs") || !strings.Contains(err.Error(), "--tokenizer") {
			t.Errorf("%s over NATS without a tokenizer: %v, want a refusal naming structured_outputs and --tokenizer", kind, err)
		} else if rep == nil || rep.ErrorParam != "structured_outputs" {
			t.Errorf("%s over NATS: reply %+v, want error_param structured_outputs", kind, rep)
		}
	}
	r := soRequest{field: "guided_regex", value: "[a-z]+", maxTokens: 8}
	_, err := oj.client.Completions.New(ctx, seeded(oj.info.Job, 1, 8), option.WithJSONSet(r.field, r.value))
	if e := apiError(t, err); e.StatusCode != 400 || e.Param != "structured_outputs" || !strings.Contains(e.Message, "tokenizer") {
		t.Errorf("guided_regex over HTTP without a tokenizer: %d param %q %q, want 400 naming structured_outputs and the tokenizer", e.StatusCode, e.Param, e.Message)
	}
	soCheckBadInput(t, oj)
}

// soCheckBadInput: constraints that do not compile, or come with
// what they exclude, are refused with 400 naming the field and the
// problem.
func soCheckBadInput(t *testing.T, oj *openaiJob) {
	t.Helper()
	ctx := testContext(t, time.Minute)
	cases := []struct {
		name, field string
		value       any
		param, says string
	}{
		{"unsupported keyword", "response_format", soJSONSchemaFormat("m", `{"type":"object","properties":{"n":{"type":"integer","multipleOf":3}}}`),
			"response_format.json_schema.schema", "/properties/n/multipleOf: multipleOf is not supported"},
		{"unknown keyword", "guided_json", json.RawMessage(`{"type":"string","maxLenght":3}`), "guided_json", "maxLenght"},
		{"not", "structured_outputs", map[string]any{"json": map[string]any{"not": map[string]any{"type": "null"}}}, "structured_outputs.json", "/not: not"},
		{"unknown type", "structured_outputs", map[string]any{"json": map[string]any{"type": "strin"}}, "structured_outputs.json", `"strin"`},
		{"no schema", "response_format", map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "x"}},
			"response_format.json_schema.schema", "required"},
		{"bad regex", "guided_regex", "(ab", "guided_regex", "missing closing )"},
		{"undefined rule", "guided_grammar", "root ::= foo", "guided_grammar", `"foo"`},
		{"ignore_eos", "guided_choice", []string{"a"}, "ignore_eos", "structured outputs"},
	}
	for _, tc := range cases {
		opts := []option.RequestOption{option.WithJSONSet(tc.field, tc.value)}
		if tc.name == "ignore_eos" {
			opts = append(opts, ignoreEOS)
		}
		_, err := oj.client.Completions.New(ctx, seeded(oj.info.Job, 1, 8), opts...)
		e := apiError(t, err)
		if e.StatusCode != 400 || e.Param != tc.param || !strings.Contains(e.Message, tc.says) {
			t.Errorf("%s: %d param %q message %q; want 400 naming %s and %q", tc.name, e.StatusCode, e.Param, e.Message, tc.param, tc.says)
		}
	}
	two := []option.RequestOption{option.WithJSONSet("guided_regex", "a"), option.WithJSONSet("guided_choice", []string{"a"})}
	_, err := oj.client.Completions.New(ctx, seeded(oj.info.Job, 1, 8), two...)
	if e := apiError(t, err); e.StatusCode != 400 || !strings.Contains(e.Message, "guided_regex") || !strings.Contains(e.Message, "guided_choice") {
		t.Errorf("two forms at once: %d %q, want 400 naming both", e.StatusCode, e.Message)
	}
}

// soCL100KEOS is <|endoftext|>, cl100k_base's end of text.
const soCL100KEOS = 100257

// soKVConstraint is one constraint of the preemption workload, and the
// check of an output of it that ends with stop.
type soKVConstraint struct {
	so    api.StructuredOutputs
	check func(string) error
}

// soKVConstraints are the preemption workload's constraints: long outputs
// (words, nested lists, trees) and short ones (a record, a choice).
func soKVConstraints(t *testing.T) []soKVConstraint {
	t.Helper()
	person, tree := soSchemas[0], soSchemas[8]
	words := `([a-z]+ ){5,40}[a-z]+\.`
	return []soKVConstraint{
		{api.StructuredOutputs{JSON: json.RawMessage(tree.schema)}, soValidates(soOracle(t, tree.name, tree.oracleText()))},
		{api.StructuredOutputs{Regex: words}, soFullMatch(words)},
		{api.StructuredOutputs{Grammar: soNestedListGBNF}, soIsNestedList},
		{api.StructuredOutputs{JSON: json.RawMessage(person.schema)}, soValidates(soOracle(t, person.name, person.oracleText()))},
		{api.StructuredOutputs{Choice: soChoices}, soOneOf(soChoices)},
	}
}

// soKVRequests are n constrained requests, by turns of cs, seeded at
// temperature 1 (every third greedy, every other one with top-k 50),
// whose prompts (16 to 135 tokens) are short beside what they may write
// (48 to 127 tokens): a small pool fills as they decode, so rank 0
// preempts sequences that have written tokens under their constraint.
func soKVRequests(n int, cs []soKVConstraint) []*api.GenerateRequest {
	reqs := make([]*api.GenerateRequest, n)
	for i := range reqs {
		p := api.DefaultParams()
		seed := uint64(7000 + i)
		p.Temperature, p.Seed = 1, &seed
		if i%2 == 1 {
			p.TopK = 50
		}
		if i%3 == 0 {
			p.Temperature, p.Seed = 0, nil
		}
		p.StructuredOutputs = &cs[i%len(cs)].so
		reqs[i] = &api.GenerateRequest{PromptTokenIDs: tokens(16+(i*37)%120, i, 4096), MaxTokens: 48 + (i*29)%80, Params: p}
	}
	return reqs
}

// soGenerateReplies sends reqs to j at once and returns their replies,
// failing the test on any error.
func soGenerateReplies(t *testing.T, j *job, reqs []*api.GenerateRequest) []*api.GenerateReply {
	t.Helper()
	nc, subj := connect(t, j)
	var reps []*api.GenerateReply
	for i, r := range generateAllWithin(nc, subj, reqs, 3*time.Minute) {
		if r.err != nil {
			t.Fatalf("request %d: %v", i, r.err)
		}
		reps = append(reps, r.rep)
	}
	return reps
}

// TestStructuredSameTokensUnderPreemption: on `tpcoord worker` with a pool
// of 24 blocks of 16 tokens (its logits computed from the tokens read
// back through each row's block table), 32 seeded and greedy constrained
// requests sent at once, which rank 0 must preempt and recompute, give
// exactly the tokens and finish reason each gave alone; the outputs that
// end with stop satisfy their constraints.
func TestStructuredSameTokensUnderPreemption(t *testing.T) {
	tok, err := tokenizer.Load("tiktoken:cl100k_base")
	if err != nil {
		t.Fatal(err)
	}
	cs := soKVConstraints(t)
	reqs := soKVRequests(32, cs)
	j := launch(t, "--nproc", "2", "--job", "e2e-so-kv", "--tokenizer", "tiktoken:cl100k_base", "--eos", strconv.Itoa(soCL100KEOS),
		"--max-batch", "8", "--executor", "worker", "--forward-timeout", "60s", "--max-num-batched-tokens", "64",
		"--worker-cmd", tpcoordBin+" worker --socket {socket} --log-format text --kv-blocks 24 --block-size 16 --max-model-len 1024")
	start := time.Now()
	alone := make([]*api.GenerateReply, len(reqs))
	for i, r := range reqs {
		alone[i] = soGenerateReplies(t, j, []*api.GenerateRequest{r})[0]
	}
	t.Logf("%d requests one at a time: %v", len(reqs), time.Since(start).Round(time.Millisecond))
	preempted := soPreemptions(t, j)
	start = time.Now()
	batch := soGenerateReplies(t, j, reqs)
	t.Logf("%d requests at once: %v, %d preemptions", len(reqs), time.Since(start).Round(time.Millisecond), soPreemptions(t, j)-preempted)
	if soPreemptions(t, j) == preempted {
		t.Errorf("rank 0 preempted nothing: the workload did not test preemption")
	}
	stops, written := 0, 0
	for i, r := range reqs {
		a, b := alone[i], batch[i]
		written += len(b.Tokens)
		if !slices.Equal(a.Tokens, b.Tokens) || a.FinishReason != b.FinishReason {
			t.Errorf("request %d (%s): alone %v (%s), in the batch %v (%s)", i, soKindOf(r), a.Tokens, a.FinishReason, b.Tokens, b.FinishReason)
		}
		if b.FinishReason == "stop" {
			stops++
			soCheckStopOutput(t, tok, b.Tokens, cs[i%len(cs)].check, fmt.Sprintf("request %d (%s)", i, soKindOf(r)))
		}
	}
	t.Logf("%d of %d ended with stop; %d tokens written", stops, len(reqs), written)
	stopAndCheckDigests(t, j, 2)
}

// soKindOf is the kind of r's constraint.
func soKindOf(r *api.GenerateRequest) string {
	kind, _, _ := r.StructuredOutputs.Kind()
	return kind
}

// soCheckStopOutput decodes tokens, which end with cl100k's EOS, and checks
// the text.
func soCheckStopOutput(t *testing.T, tok *tokenizer.Tokenizer, tokens []int32, check func(string) error, what string) {
	t.Helper()
	if len(tokens) == 0 || tokens[len(tokens)-1] != soCL100KEOS {
		t.Errorf("%s ended with stop, tokens %v, want EOS last", what, tokens)
		return
	}
	text, err := tok.Decode(tokens[:len(tokens)-1])
	if err != nil {
		t.Errorf("%s: %v", what, err)
	} else if err := check(text); err != nil {
		t.Errorf("%s: output %q ended with stop and %v", what, text, err)
	}
}

// soPreemptions is the preemptions rank 0 counts.
func soPreemptions(t *testing.T, j *job) uint64 {
	t.Helper()
	var sts []kvStatus
	if err := statusInto(j, &sts); err != nil {
		t.Fatal(err)
	}
	for _, st := range sts {
		if st.Rank == 0 && st.KV != nil {
			return st.KV.Preemptions
		}
	}
	t.Fatal("rank 0 reports no KV cache")
	return 0
}

// soServeModel starts `tpcoord serve-model dir args...` on a free port and
// waits for its ready file: a job like launch's, stopped with SIGTERM.
func soServeModel(t *testing.T, dir string, args ...string) *job {
	t.Helper()
	port, err := freeport.Pick("127.0.0.1", false)
	if err != nil {
		t.Fatal(err)
	}
	script, err := filepath.Abs("../examples/torch-worker/worker.py")
	if err != nil {
		t.Fatal(err)
	}
	ready := filepath.Join(t.TempDir(), "ready.json")
	cmd := exec.Command(tpcoordBin, append([]string{"serve-model", dir, "--port", strconv.Itoa(port), "--ready-file", ready,
		"--worker-script", script, "--log-format", "text"}, args...)...)
	return startJob(t, "serve-model", cmd, ready, 3*time.Minute, func(i readyInfo) bool { return i.HTTPURL != "" })
}

// soChat is a chat completion of a seeded request at temperature 1
// whose answer follows schema (response_format json_schema, through the
// client's own types).
func (oj *openaiJob) soChat(ctx context.Context, model string, s soSchema, seed, maxTokens int64) soOutput {
	p := openai.ChatCompletionNewParams{
		Model:               openai.ChatModel(model),
		Messages:            []openai.ChatCompletionMessageParamUnion{openai.UserMessage(soPrompt(seed))},
		MaxCompletionTokens: openai.Int(maxTokens),
		Seed:                openai.Int(seed),
		Temperature:         openai.Float(1),
		ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &openai.ResponseFormatJSONSchemaParam{
			JSONSchema: openai.ResponseFormatJSONSchemaJSONSchemaParam{Name: s.name, Strict: openai.Bool(true), Schema: json.RawMessage(s.schema)}}},
	}
	c, err := oj.client.Chat.Completions.New(ctx, p)
	if err != nil {
		return soOutput{err: err}
	}
	if len(c.Choices) != 1 {
		return soOutput{err: fmt.Errorf("%d choices: %s", len(c.Choices), c.RawJSON())}
	}
	ch := c.Choices[0]
	ids, err := soTokenIDs(ch.JSON.ExtraFields)
	return soOutput{text: ch.Message.Content, finish: string(ch.FinishReason), ids: ids, err: err}
}

// TestTorchStructuredTP2: `tpcoord serve-model DIR -tp 2` on the tiny
// random Llama checkpoint (the PyTorch worker at TP 2, its byte-level
// tokenizer and chat template) answers json_schema completions and chat
// completions over 3 schemas, seeded at temperature 1: every answer that
// ends with stop parses and soValidates, and most end with stop.
func TestTorchStructuredTP2(t *testing.T) {
	py := torchPython(t)
	ck := makeCheckpoint(t, py)
	j := soServeModel(t, ck.dir, "-tp", "2", "--served-model-name", "tiny", "--max-batch", "8", "--kv-cache-gib", "0.25")
	if len(j.info.PIDs) != 2 {
		t.Fatalf("serve-model -tp 2 started ranks %v, want 2", j.info.PIDs)
	}
	oj := &openaiJob{job: j, client: newOpenAIClient(j.info.HTTPURL, "")}
	ctx := testContext(t, 5*time.Minute)
	var reqs []soRequest
	schemas := map[string]soSchema{}
	for _, s := range []soSchema{soSchemas[0], soSchemas[8], soSchemas[5]} { // person, tree, formats
		schemas[s.name] = s
		check := soValidates(soOracle(t, s.name, s.oracleText()))
		for seed := range int64(4) {
			for _, api := range []string{"completion", "chat"} {
				reqs = append(reqs, soRequest{group: s.name + " " + api, field: "response_format", value: soJSONSchemaFormat(s.name, s.schema),
					seed: 300 + seed, maxTokens: 200, check: check})
			}
		}
	}
	start := time.Now()
	counts := soRunChecked(t, reqs, 8, func(r soRequest) soOutput {
		if name, ok := strings.CutSuffix(r.group, " chat"); ok {
			return oj.soChat(ctx, "tiny", schemas[name], r.seed, r.maxTokens)
		}
		return oj.soComplete(ctx, "tiny", r)
	})
	stops := 0
	for _, g := range slices.Sorted(maps.Keys(counts)) {
		c := counts[g]
		t.Logf("%-18s stop %d (%d distinct) length %d", g, c.stop, len(c.distinct), c.length)
		stops += c.stop
	}
	t.Logf("%d requests in %v, %d ended with stop", len(reqs), time.Since(start).Round(time.Millisecond), stops)
	if stops*5 < len(reqs)*4 {
		t.Errorf("%d of %d ended with stop, want at least 80%%", stops, len(reqs))
	}
	if _, err := j.stop(syscall.SIGTERM, time.Minute); err != nil {
		t.Errorf("serve-model after SIGTERM: %v", err)
	}
}
