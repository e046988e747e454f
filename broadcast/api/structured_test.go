package api

import (
	"errors"
	"strings"
	"testing"

	"github.com/tpcoord/tpcoord/internal/fielderr"
)

func TestStructuredOutputsValidate(t *testing.T) {
	long := strings.Repeat("a", MaxStructuredBytes+1)
	many := make([]string, MaxChoices+1)
	for i := range many {
		many[i] = "x"
	}
	cases := []struct {
		name  string
		s     StructuredOutputs
		field string // "" for valid
	}{
		{"json", StructuredOutputs{JSON: []byte(`{"type":"string"}`)}, ""},
		{"regex", StructuredOutputs{Regex: "[a-z]+"}, ""},
		{"choice", StructuredOutputs{Choice: []string{"yes", "no"}}, ""},
		{"grammar", StructuredOutputs{Grammar: `root ::= "a"`}, ""},
		{"json_object", StructuredOutputs{JSONObject: true}, ""},
		{"none", StructuredOutputs{}, "structured_outputs"},
		{"two", StructuredOutputs{Regex: "a", JSONObject: true}, "structured_outputs"},
		{"empty choice", StructuredOutputs{Choice: []string{}}, "structured_outputs.choice"},
		{"many choices", StructuredOutputs{Choice: many}, "structured_outputs.choice"},
		{"long regex", StructuredOutputs{Regex: long}, "structured_outputs.regex"},
		{"long choices", StructuredOutputs{Choice: []string{long[:MaxStructuredBytes/2], long[:MaxStructuredBytes/2+1]}}, "structured_outputs.choice"},
	}
	for _, c := range cases {
		err := c.s.Validate()
		var fe *fielderr.Error
		switch {
		case c.field == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.field != "" && (!errors.As(err, &fe) || fe.Field != c.field):
			t.Errorf("%s: got %v, want an error naming %s", c.name, err, c.field)
		}
	}
}

func TestStructuredOutputsKindAndKey(t *testing.T) {
	obj := StructuredOutputs{JSON: []byte(`{"type":"integer"}`)}
	str := StructuredOutputs{JSON: []byte(`"{\"type\":\"integer\"}"`)}
	if k, src, _ := str.Kind(); k != StructuredJSON || src != `{"type":"integer"}` {
		t.Fatalf("a schema in a JSON string: %s %q", k, src)
	}
	if obj.Key() != str.Key() {
		t.Error("the same schema as an object and as a string has two keys")
	}
	keys := map[string]string{}
	for name, s := range map[string]StructuredOutputs{
		"regex a": {Regex: "a"}, "grammar a": {Grammar: "a"}, "choice a": {Choice: []string{"a"}},
		"choice a,b": {Choice: []string{"a", "b"}}, "choice ab": {Choice: []string{"ab"}}, "json_object": {JSONObject: true},
	} {
		k := s.Key()
		if other, ok := keys[k]; ok {
			t.Errorf("%s and %s share a key", name, other)
		}
		keys[k] = name
	}
}

func TestParseStructuredOutputs(t *testing.T) {
	r, err := ParseGenerateRequest([]byte(`{"prompt_token_ids":[1],"max_tokens":4,"structured_outputs":{"choice":["yes","no"]}}`), 10)
	if err != nil || r.StructuredOutputs == nil || len(r.StructuredOutputs.Choice) != 2 {
		t.Fatalf("got %+v, %v", r, err)
	}
	for body, field := range map[string]string{
		`{"prompt_token_ids":[1],"max_tokens":4,"structured_outputs":{}}`:                                   "structured_outputs",
		`{"prompt_token_ids":[1],"max_tokens":4,"ignore_eos":true,"structured_outputs":{"regex":"a"}}`:      "ignore_eos",
		`{"prompt_token_ids":[1],"max_tokens":4,"min_tokens":2,"structured_outputs":{"regex":"a"}}`:         "min_tokens",
		`{"prompt_token_ids":[1],"max_tokens":4,"structured_outputs":{"regex":"a","grammar":"root ::= x"}}`: "structured_outputs",
	} {
		_, err := ParseGenerateRequest([]byte(body), 10)
		var fe *fielderr.Error
		if !errors.As(err, &fe) || fe.Field != field {
			t.Errorf("%s: got %v, want an error naming %s", body, err, field)
		}
	}
}
