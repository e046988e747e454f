package gateway

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tpcoord/tpcoord/broadcast/api"
)

// TestStructuredForms: every request form of structured outputs reaches
// rank 0 as its structured_outputs, on completions and chat.
func TestStructuredForms(t *testing.T) {
	schema := `{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]}`
	for _, c := range []struct {
		path, fields string
		want         api.StructuredOutputs
	}{
		{"/v1/completions", `"response_format":{"type":"json_object"}`, api.StructuredOutputs{JSONObject: true}},
		{"/v1/chat/completions", `"response_format":{"type":"json_schema","json_schema":{"name":"x","strict":true,"schema":` + schema + `}}`, api.StructuredOutputs{JSON: json.RawMessage(schema)}},
		{"/v1/completions", `"response_format":{"type":"text"},"guided_regex":"[a-z]+"`, api.StructuredOutputs{Regex: "[a-z]+"}},
		{"/v1/completions", `"structured_outputs":{"choice":["yes","no"],"disable_any_whitespace":true}`, api.StructuredOutputs{Choice: []string{"yes", "no"}}},
		{"/v1/chat/completions", `"structured_outputs":{"grammar":"root ::= \"a\" [0-9]+"}`, api.StructuredOutputs{Grammar: `root ::= "a" [0-9]+`}},
		{"/v1/completions", `"guided_json":` + schema, api.StructuredOutputs{JSON: json.RawMessage(schema)}},
		{"/v1/completions", `"guided_json":` + mustQuote(schema), api.StructuredOutputs{JSON: json.RawMessage(mustQuote(schema))}},
		{"/v1/chat/completions", `"guided_grammar":"root ::= [a-c]"`, api.StructuredOutputs{Grammar: "root ::= [a-c]"}},
	} {
		g, f := newTestGateway(t, "abc", nil, WithTokenizer(byteTokenizer{template: true}))
		srv := serve(t, g)
		resp := post(t, srv, c.path, body(c.path, c.fields))
		if resp.StatusCode != 200 {
			t.Errorf("%s %s: status %d: %+v", c.path, c.fields, resp.StatusCode, decode[errorBody](t, resp).Error)
			continue
		}
		resp.Body.Close()
		reqs := f.requests()
		if len(reqs) != 1 || reqs[0].StructuredOutputs == nil || reqs[0].StructuredOutputs.Key() != c.want.Key() {
			t.Errorf("%s %s: rank 0 got %+v", c.path, c.fields, reqs)
		}
	}
}

func mustQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func body(path, fields string) string {
	if strings.Contains(path, "chat") {
		return `{"messages":[{"role":"user","content":"hi"}],"max_tokens":3,` + fields + `}`
	}
	return `{"prompt":"hi","max_tokens":3,` + fields + `}`
}

// TestStructuredRefusals: a constraint that cannot be followed is a 400
// naming the field it came from, and nothing reaches rank 0.
func TestStructuredRefusals(t *testing.T) {
	for _, c := range []struct {
		fields, param, words string
	}{
		{`"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"integer","multipleOf":3}}}`, "response_format.json_schema.schema", "multipleOf"},
		{`"response_format":{"type":"json_schema","json_schema":{"name":"x"}}`, "response_format.json_schema.schema", "required"},
		{`"response_format":{"type":"yaml"}`, "response_format.type", "yaml"},
		{`"guided_regex":"a(b"`, "guided_regex", "missing closing )"},
		{`"guided_regex":"\\bword"`, "guided_regex", "word boundary"},
		{`"structured_outputs":{"grammar":"root ::= x"}`, "structured_outputs.grammar", "x"},
		{`"structured_outputs":{"choice":[]}`, "structured_outputs.choice", "entries"},
		{`"structured_outputs":{"regex":"a","json_object":true}`, "structured_outputs", "exactly one"},
		{`"structured_outputs":{"json_object":true,"whitespace_pattern":" *"}`, "structured_outputs.whitespace_pattern", "compact"},
		{`"guided_choice":["a"],"response_format":{"type":"json_object"}`, "guided_choice", "response_format"},
		{`"guided_choice":["a"],"ignore_eos":true`, "ignore_eos", "grammar"},
		{`"guided_choice":["a"],"min_tokens":3`, "min_tokens", "grammar"},
		{`"guided_whitespace_pattern":" "`, "guided_whitespace_pattern", "compact"},
	} {
		g, f := newTestGateway(t, "abc", nil, WithTokenizer(byteTokenizer{}))
		srv := serve(t, g)
		resp := post(t, srv, "/v1/completions", body("/v1/completions", c.fields))
		if resp.StatusCode != 400 {
			t.Errorf("%s: status %d, want 400", c.fields, resp.StatusCode)
			resp.Body.Close()
			continue
		}
		e := decode[errorBody](t, resp)
		if e.Error.Param == nil || *e.Error.Param != c.param || !strings.Contains(e.Error.Message, c.words) {
			t.Errorf("%s: %+v, want %s named, saying %q", c.fields, e.Error, c.param, c.words)
		}
		if n := len(f.requests()); n != 0 {
			t.Errorf("%s: %d requests reached rank 0", c.fields, n)
		}
	}
}
