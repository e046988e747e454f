package grammar

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// oracleSchema compiles schema with santhosh-tekuri/jsonschema (draft
// 2020-12, formats asserted): the validator that judges our outputs.
func oracleSchema(t *testing.T, schema string) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
	if err != nil {
		t.Fatalf("oracle: %v", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	if err := c.AddResource("schema.json", doc); err != nil {
		t.Fatalf("oracle: %v", err)
	}
	sch, err := c.Compile("schema.json")
	if err != nil {
		t.Fatalf("oracle: %v", err)
	}
	return sch
}

// checkOutput fails unless out is compact JSON that the oracle accepts.
func checkOutput(t *testing.T, sch *jsonschema.Schema, out string) {
	t.Helper()
	if !json.Valid([]byte(out)) {
		t.Fatalf("not JSON: %q", out)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, []byte(out)); err != nil || buf.String() != out {
		t.Fatalf("not compact: %q", out)
	}
	if sch == nil {
		return
	}
	inst, err := jsonschema.UnmarshalJSON(strings.NewReader(out))
	if err != nil {
		t.Fatalf("oracle cannot read %q: %v", out, err)
	}
	if err := sch.Validate(inst); err != nil {
		t.Fatalf("output does not validate: %q\n%v", out, err)
	}
}

// sample generates n strings of g with a fixed seed.
func sample(t *testing.T, g *Grammar, seed uint64, n int) []string {
	t.Helper()
	w := newWalker(g, seed)
	out := make([]string, n)
	for i := range out {
		s, ok := w.generate()
		if !ok {
			t.Fatal("the grammar matches nothing")
		}
		out[i] = s
	}
	return out
}

type oracleCase struct {
	name   string
	schema string
	oracle string   // the schema the oracle judges by, when it differs (nullable)
	see    []string // each appears in some output: the walk reaches it
}

// oracleCases cover every supported keyword.
var oracleCases = []oracleCase{
	{name: "person", schema: `{"title":"P","description":"d","$schema":"https://json-schema.org/draft/2020-12/schema","$id":"https://x/p",
		"type":"object","properties":{
		"name":{"type":"string","minLength":1,"maxLength":20,"$comment":"c"},
		"age":{"type":"integer","minimum":0,"maximum":150,"default":3,"examples":[4]},
		"tags":{"type":"array","items":{"type":"string","maxLength":3},"maxItems":3,"deprecated":false,"readOnly":true,"writeOnly":false}},
		"required":["name","age"],"additionalProperties":false}`,
		see: []string{`"tags":[]`, `"age":0,`, `"age":150`, `,"tags":[`, `"]}`}},
	{name: "nullable-and-type-lists", schema: `{"type":"object","properties":{
		"a":{"type":["string","null"]},"b":{"type":"integer","nullable":true},"c":{"type":["integer","boolean"]}},
		"required":["a","b","c"],"additionalProperties":false}`,
		oracle: `{"type":"object","properties":{"a":{"type":["string","null"]},"b":{"type":["integer","null"]},"c":{"type":["integer","boolean"]}},
		"required":["a","b","c"],"additionalProperties":false}`,
		see: []string{`"a":null`, `"b":null`, `"c":true`, `"c":false`, `"c":-`}},
	{name: "enum-and-const", schema: `{"type":"object","properties":{
		"color":{"enum":["red","gr\"een\n",{"x" : [1, 2.50]},null,3.5e0]},
		"kind":{"const":{"k":true,"z":"é/\u0001"}},
		"typed":{"type":"string","enum":["a",1,"b"]},
		"num":{"type":"integer","enum":[1,1.0,1.5,"x",2e2]}},
		"required":["color","kind","typed","num"],"additionalProperties":false}`,
		see: []string{`{"x":[1,2.50]}`, `"gr\"een\n"`, `"color":null`, `3.5e0`, `"typed":"b"`, `"num":2e2`, `"num":1.0`}},
	{name: "refs-defs-definitions", schema: `{"$defs":{"point":{"type":"object","properties":{"x":{"type":"number"},"y":{"$ref":"#/definitions/coord"}},
		"required":["x","y"],"additionalProperties":false}},
		"definitions":{"coord":{"type":"number","minimum":-1,"maximum":1}},
		"type":"array","items":{"$ref":"#/$defs/point"},"minItems":1,"maxItems":4}`,
		see: []string{`"y":-1`, `"y":1}`, `e`, `},{`}},
	{name: "tree", schema: `{"type":"object","properties":{"value":{"type":"integer"},
		"children":{"type":"array","items":{"$ref":"#"}}},"required":["value","children"],"additionalProperties":false}`,
		see: []string{`"children":[{"value":`, `[{"value":`, `]}]}]}`}},
	{name: "anyOf-allOf-oneOf", schema: `{"type":"object","properties":{
		"u":{"anyOf":[{"type":"string","pattern":"^[a-z]{2,4}$"},{"type":"integer","exclusiveMinimum":-5,"exclusiveMaximum":5},{"allOf":[{"type":"boolean"}]}]},
		"o":{"oneOf":[{"type":"string","maxLength":2},{"type":"null"},{"$ref":"#/$defs/n"}]}},
		"required":["u","o"],"additionalProperties":false,"$defs":{"n":{"type":"number","minimum":0}}}`,
		see: []string{`"u":-4`, `"u":4`, `"u":true`, `"o":null`, `"o":0`}},
	{name: "strings", schema: `{"type":"object","properties":{
		"p":{"type":"string","pattern":"^\\d{3}-[A-Z\"\\\\/\n]+$"},
		"dot":{"type":"string","pattern":"^a.b$"},
		"date":{"type":"string","format":"date"},"time":{"type":"string","format":"time"},
		"dt":{"type":"string","format":"date-time"},"uuid":{"type":"string","format":"uuid"},
		"ip":{"type":"string","format":"ipv4","maxLength":15},"s":{"type":"string","minLength":2,"maxLength":5},
		"fixed":{"type":"string","pattern":"^[ab]{3}$","minLength":3,"maxLength":3}},
		"required":["p","dot","date","time","dt","uuid","ip","s","fixed"],"additionalProperties":false}`,
		see: []string{`\"`, `\\`, `\n`, `\/`, `\u000a`, `-02-29`, `Z"`, `+`, `\u00`}},
	{name: "numbers", schema: `{"type":"object","properties":{
		"n1":{"type":"number","minimum":-1.5,"maximum":2.25},
		"n2":{"type":"number","exclusiveMinimum":0,"exclusiveMaximum":1e-1},
		"n3":{"type":"integer","minimum":18446744073709551615,"maximum":18446744073709551700},
		"n4":{"type":"number","exclusiveMaximum":-100},
		"n5":{"type":"number"},
		"n6":{"type":"integer","minimum":-1e20,"exclusiveMaximum":-99999999999999999999.5}},
		"required":["n1","n2","n3","n4","n5","n6"],"additionalProperties":false}`,
		see: []string{`"n1":-1.5`, `"n1":2.25`, `"n2":0.0`, `"n3":18446744073709551615`, `"n3":18446744073709551700`, `"n6":-100000000000000000000}`}},
	{name: "arrays", schema: `{"type":"object","properties":{
		"tuple":{"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}],"items":false,"minItems":1},
		"more":{"type":"array","prefixItems":[{"type":"boolean"}],"items":{"type":"null"},"minItems":2,"maxItems":4,"uniqueItems":false},
		"any":{"type":"array","items":true},
		"many":{"type":"array","items":{"type":"integer","minimum":0,"maximum":9},"minItems":20,"maxItems":30}},
		"required":["tuple","more","any","many"],"additionalProperties":false}`,
		see: []string{`"tuple":["`, `"tuple":["`, `,null,null,null]`, `"any":[]`}},
	{name: "maps-and-free-objects", schema: `{"type":"object","properties":{
		"m":{"type":"object","additionalProperties":{"type":"integer","minimum":0}},
		"r":{"type":"object","required":["id"],"additionalProperties":{"type":"string"}},
		"free":{"type":"object"},"none":{"type":"object","additionalProperties":false},
		"open":{"type":"object","properties":{"a":{"type":"boolean"}},"additionalProperties":{"type":"string"}}},
		"required":["m","r","free","none","open"]}`,
		see: []string{`"m":{}`, `"r":{"id":"`, `"none":{}`, `"open":{}`, `"open":{"a":`}},
	{name: "true-and-empty-schemas", schema: `{"type":"object","properties":{"t":true,"e":{},"f":false},"required":["t","e"]}`,
		see: []string{`"t":{`, `"e":[`, `"t":"`, `"e":null`}},
	{name: "many-optional", schema: `{"type":"object","properties":{
		"a":{"type":"integer"},"b":{"type":"string"},"c":{"type":"boolean"},"d":{"type":"null"},
		"e":{"type":"number"},"f":{"type":"string","format":"uuid"},"g":{"type":"integer"}},"required":["d"]}`,
		see: []string{`{"d":null}`, `{"a":`, `"g":`, `null,"e"`}},
	{name: "forty-optional", schema: fortyOptional(), see: []string{`"p0":`, `"p39":`, `{"p1":`}},
	{name: "typeless", schema: `{"minLength":3,"minimum":10,"items":{"type":"integer"},"properties":{"x":{"type":"null"}},"required":["x"]}`,
		see: []string{`{"x":null}`, `[`, `"`, `true`, `null`}},
}

// TestFromJSONSchemaOracle generates 300 strings for each schema with the
// random walker and has the oracle validate each (and encoding/json
// check it is compact JSON), then checks that the walk reached each
// expected fragment. The seeds are fixed, so the run is deterministic.
func TestFromJSONSchemaOracle(t *testing.T) {
	for i, tc := range oracleCases {
		t.Run(tc.name, func(t *testing.T) {
			g, err := FromJSONSchema([]byte(tc.schema))
			if err != nil {
				t.Fatal(err)
			}
			oracle := tc.oracle
			if oracle == "" {
				oracle = tc.schema
			}
			sch := oracleSchema(t, oracle)
			outs := sample(t, g, uint64(i+1), 300)
			for _, out := range outs {
				checkOutput(t, sch, out)
			}
			all := strings.Join(outs, "\n")
			for _, frag := range tc.see {
				if !strings.Contains(all, frag) {
					t.Errorf("no output contains %q; first outputs: %q", frag, outs[:3])
				}
			}
		})
	}
}

// TestJSONValueAndObject checks that JSONValue's and JSONObject's random
// strings are compact JSON (objects for JSONObject), and that both accept
// a hand-written compact value and refuse whitespace, a lone surrogate
// escape and a raw control character.
func TestJSONValueAndObject(t *testing.T) {
	for _, out := range sample(t, JSONValue(), 7, 500) {
		checkOutput(t, nil, out)
	}
	for _, out := range sample(t, JSONObject(), 8, 500) {
		checkOutput(t, nil, out)
		dec := json.NewDecoder(strings.NewReader(out))
		dec.UseNumber()
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			t.Fatalf("not an object: %q", out)
		}
	}
	good := `{"a":[1,-0.5e+3,true,false,null,"\u00e9\/\"\\\b\f\n\r\t\uFFFF","é"],"":{}}`
	for _, g := range []*Grammar{JSONValue(), JSONObject()} {
		if !recognizes(g, good) {
			t.Errorf("refused %s", good)
		}
		for _, bad := range []string{`{"a": 1}`, `{"a":"\ud800"}`, "{\"a\":\"\x01\"}", `{"a":01}`, `{"a":1.}`, `{"a":[1,]}`} {
			if recognizes(g, bad) {
				t.Errorf("accepted %q", bad)
			}
		}
	}
	if recognizes(JSONObject(), `[1]`) || !recognizes(JSONValue(), `[1]`) {
		t.Error("JSONObject must take objects only, JSONValue any value")
	}
}

// TestPropertyOrder checks that properties come in the schema's order
// (not sorted), optional ones included, and nothing else comes.
func TestPropertyOrder(t *testing.T) {
	schema := `{"type":"object","properties":{"zeta":{"type":"integer"},"alpha":{"type":"boolean"},"mid":{"type":"null"},"beta":{"type":"integer"}},"required":["zeta","mid"]}`
	g, err := FromJSONSchema([]byte(schema))
	if err != nil {
		t.Fatal(err)
	}
	order := []string{"zeta", "alpha", "mid", "beta"}
	sawOptional := map[string]bool{}
	for _, out := range sample(t, g, 3, 300) {
		dec := json.NewDecoder(strings.NewReader(out))
		var keys []string
		depth := 0
		for {
			tok, err := dec.Token()
			if err != nil {
				break
			}
			if d, ok := tok.(json.Delim); ok && (d == '{' || d == '[') {
				depth++
			} else if ok {
				depth--
			} else if s, ok := tok.(string); ok && depth == 1 && dec.More() {
				keys = append(keys, s)
				_, _ = dec.Token() // the value: scalars only here
			}
		}
		last := -1
		for _, k := range keys {
			i := indexOf(order, k)
			if i <= last {
				t.Fatalf("%q: keys %v out of the schema's order %v", out, keys, order)
			}
			last = i
			sawOptional[k] = true
		}
	}
	if !sawOptional["alpha"] || !sawOptional["beta"] {
		t.Errorf("optional properties never generated: %v", sawOptional)
	}
}

func indexOf(list []string, s string) int {
	for i, x := range list {
		if x == s {
			return i
		}
	}
	return -1
}

// TestRecursiveRef checks a $ref "#" tree: outputs validate and the walk
// nests at least four levels deep in some output.
func TestRecursiveRef(t *testing.T) {
	schema := `{"type":"object","properties":{"v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#"},"maxItems":3}},"required":["v","kids"],"additionalProperties":false}`
	g, err := FromJSONSchema([]byte(schema))
	if err != nil {
		t.Fatal(err)
	}
	sch := oracleSchema(t, schema)
	deepest := 0
	for _, out := range sample(t, g, 11, 300) {
		checkOutput(t, sch, out)
		deepest = max(deepest, strings.Count(out, `"kids":[{`))
	}
	if deepest < 4 {
		t.Errorf("deepest output nests %d levels; want >= 4", deepest)
	}
	if !recognizes(g, `{"v":1,"kids":[{"v":2,"kids":[{"v":3,"kids":[]}]}]}`) {
		t.Error("refused a three-level tree")
	}
	if recognizes(g, `{"v":1,"kids":[{"v":2,"kids":[]},{"v":2,"kids":[]},{"v":2,"kids":[]},{"v":2,"kids":[]}]}`) {
		t.Error("accepted four children with maxItems 3")
	}
}

type errorCase struct{ schema, pointer, keyword string }

// schemaErrorCases are schemas refused, with the pointer and keyword the
// error must name.
func schemaErrorCases() []errorCase {
	deep := strings.Repeat(`{"type":"array","items":`, MaxSchemaDepth+1) + `{}` + strings.Repeat(`}`, MaxSchemaDepth+1)
	many := func(n int, item string) string {
		parts := make([]string, n)
		for i := range parts {
			parts[i] = fmt.Sprintf(item, i)
		}
		return strings.Join(parts, ",")
	}
	return []errorCase{
		{`{"type":"object","properties":{"age":{"type":"integer","multipleOf":3}}}`, "/properties/age/multipleOf", "multipleOf"},
		{`{"type":"object","patternProperties":{"^a":{}}}`, "/patternProperties", "patternProperties"},
		{`{"type":"object","propertyNames":{"maxLength":3}}`, "/propertyNames", "propertyNames"},
		{`{"type":"object","minProperties":1}`, "/minProperties", "minProperties"},
		{`{"type":"object","maxProperties":1}`, "/maxProperties", "maxProperties"},
		{`{"type":"object","dependentRequired":{}}`, "/dependentRequired", "dependentRequired"},
		{`{"type":"object","unevaluatedProperties":false}`, "/unevaluatedProperties", "unevaluatedProperties"},
		{`{"not":{"type":"string"}}`, "/not", "not"},
		{`{"if":{},"then":{}}`, "/if", "if"},
		{`{"type":"array","contains":{"type":"string"}}`, "/contains", "contains"},
		{`{"type":"array","items":{"type":"string","format":"email"}}`, "/items/format", "format"},
		{`{"type":"array","uniqueItems":true}`, "/uniqueItems", "uniqueItems"},
		{`{"type":"array","items":[{"type":"string"}]}`, "/items", "items"},
		{`{"$anchor":"a"}`, "/$anchor", "$anchor"},
		{`{"$dynamicRef":"#a"}`, "/$dynamicRef", "$dynamicRef"},
		{`{"foo":1}`, "/foo", "foo"},
		{`{"allOf":[{"type":"string"},{"maxLength":2}]}`, "/allOf", "allOf"},
		{`{"oneOf":[{"type":"object"},{"type":"object","properties":{}}]}`, "/oneOf", "oneOf"},
		{`{"oneOf":[{"type":"integer"},{"type":"number"}]}`, "/oneOf", "oneOf"},
		{`{"type":"number","exclusiveMinimum":true,"minimum":1}`, "/exclusiveMinimum", "exclusiveMinimum"},
		{`{"$ref":"other.json#/a"}`, "/$ref", "$ref"},
		{`{"$ref":"#foo"}`, "/$ref", "$ref"},
		{`{"$ref":"#/$defs/missing"}`, "/$ref", "$ref"},
		{`{"type":"object","properties":{"a":{"$id":"x","type":"string"}}}`, "/properties/a/$id", "$id"},
		{`{"type":"string","enum":["a"],"minLength":1}`, "/minLength", "minLength"},
		{`{"type":"object","anyOf":[{"type":"object"}]}`, "/type", "type"},
		{`{"$ref":"#/$defs/a","type":"string","$defs":{"a":{}}}`, "/type", "type"},
		{`{"type":"string","pattern":"^a$","format":"date"}`, "/format", "format"},
		{`{"type":"string","pattern":"^a+$","maxLength":3}`, "/maxLength", "maxLength"},
		{`{"type":"string","format":"date","minLength":11}`, "/minLength", "minLength"},
		{`{"type":"string","pattern":"a\\bb"}`, "/pattern", "pattern"},
		{`{"type":"string","pattern":"(?<=a)b"}`, "/pattern", "pattern"},
		{`{"type":"string","maxLength":1000000}`, "/maxLength", "maxLength"},
		{`{"type":"array","minItems":1.5}`, "/minItems", "minItems"},
		{`{"type":"array","maxItems":-1}`, "/maxItems", "maxItems"},
		{`{"enum":[` + many(MaxEnum+1, "%d") + `]}`, "/enum", "enum"},
		{`{"type":"object","properties":{` + many(MaxProperties+1, `"p%d":{}`) + `}}`, "/properties", "properties"},
		{deep, strings.Repeat("/items", MaxSchemaDepth), ""},
		{`{"type":"number","maximum":1e200}`, "/maximum", "maximum"},
		{`{"type":"integer","minimum":1e99999999999}`, "/minimum", "minimum"},
		{`{"type":"object","required":["a","b"],"properties":{"a":{}},"additionalProperties":false}`, "/required/1", "required"},
		{`{"type":"object","required":["a","a"]}`, "/required", "required"},
		{`false`, "", ""},
		{`{"type":"integer","minimum":5,"maximum":3}`, "", ""},
		{`{"type":"object","properties":{"a":false},"required":["a"]}`, "", ""},
		{`{"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"anyOf":[{"$ref":"#/$defs/a"},{"type":"null"}]}},"$ref":"#/$defs/a"}`, "/$defs/a", "$ref"},
		{`{"type":"string","type":"integer"}`, "/type", "type"},
		{`{"type":"int"}`, "/type", "type"},
		{`{"type":"string","nullable":"yes"}`, "/nullable", "nullable"},
		{`{"type":"object","properties":{"a":1}}`, "/properties/a", ""},
		{`{"type":`, "/type", ""},
		{`{} {}`, "", ""},
	}
}

// TestSchemaErrors checks that each unsupported or invalid schema of
// schemaErrorCases is refused with a *SchemaError naming the JSON pointer
// and the keyword.
func TestSchemaErrors(t *testing.T) {
	cases := schemaErrorCases()
	for _, tc := range cases {
		_, err := FromJSONSchema([]byte(tc.schema))
		var se *SchemaError
		if !errors.As(err, &se) {
			t.Errorf("%.80s: got %v, want a *SchemaError", tc.schema, err)
			continue
		}
		if se.Pointer != tc.pointer || se.Keyword != tc.keyword {
			t.Errorf("%.80s: got pointer %q keyword %q (%v), want %q %q", tc.schema, se.Pointer, se.Keyword, err, tc.pointer, tc.keyword)
		}
	}
}

// fortyOptional is an object of 40 optional properties of mixed types,
// where the members after each one are shared rules.
func fortyOptional() string {
	types := []string{`{"type":"integer","minimum":-3}`, `{"type":"string","maxLength":2}`, `{"enum":[1,"a",null]}`, `{"type":"array","items":{"type":"boolean"},"maxItems":2}`}
	props := make([]string, 40)
	for i := range props {
		props[i] = fmt.Sprintf(`"p%d":%s`, i, types[i%len(types)])
	}
	return `{"type":"object","properties":{` + strings.Join(props, ",") + `},"additionalProperties":false}`
}

// TestSchemaErrorText checks the error's text: pointer, then message.
func TestSchemaErrorText(t *testing.T) {
	_, err := FromJSONSchema([]byte(`{"type":"object","properties":{"age":{"type":"integer","multipleOf":3}}}`))
	if err == nil || err.Error() != "json schema: /properties/age/multipleOf: multipleOf is not supported" {
		t.Errorf("got %v", err)
	}
	_, err = FromJSONSchema([]byte(`false`))
	if err == nil || err.Error() != "json schema: (root): the schema is false: no value satisfies it" {
		t.Errorf("got %v", err)
	}
}
