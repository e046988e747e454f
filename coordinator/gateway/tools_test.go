package gateway

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

func weatherTools() []toolIn {
	return []toolIn{
		{Type: "function", Function: &functionIn{Name: "get_weather", Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`)}},
		{Type: "function", Function: &functionIn{Name: "get_time", Parameters: json.RawMessage(`{"type":"object","properties":{}}`)}},
	}
}

func TestToolPlanRefusals(t *testing.T) {
	noParams := []toolIn{{Type: "function", Function: &functionIn{Name: "f"}}}
	twice := append(weatherTools(), weatherTools()[0])
	cases := []struct {
		name   string
		f      toolFields
		param  string
		mode   toolMode
		named  string
		noPlan bool
	}{
		{name: "no tools", f: toolFields{}, noPlan: true},
		{name: "no tools, none", f: toolFields{ToolChoice: json.RawMessage(`"none"`)}, noPlan: true},
		{name: "choice without tools", f: toolFields{ToolChoice: json.RawMessage(`"required"`)}, param: "tool_choice"},
		{name: "default auto", f: toolFields{Tools: weatherTools()}, mode: toolsAuto},
		{name: "required", f: toolFields{Tools: weatherTools(), ToolChoice: json.RawMessage(`"required"`)}, mode: toolsRequired},
		{name: "none", f: toolFields{Tools: weatherTools(), ToolChoice: json.RawMessage(`"none"`)}, mode: toolsNone},
		{name: "named", f: toolFields{Tools: weatherTools(), ToolChoice: json.RawMessage(`{"type":"function","function":{"name":"get_time"}}`)}, mode: toolsNamed, named: "get_time"},
		{name: "named unknown", f: toolFields{Tools: weatherTools(), ToolChoice: json.RawMessage(`{"type":"function","function":{"name":"nope"}}`)}, param: "tool_choice.function.name"},
		{name: "bad word", f: toolFields{Tools: weatherTools(), ToolChoice: json.RawMessage(`"always"`)}, param: "tool_choice"},
		{name: "no parameters", f: toolFields{Tools: noParams}, param: "tools[0].function.parameters"},
		{name: "twice", f: toolFields{Tools: twice}, param: "tools[2].function.name"},
		{name: "not a function", f: toolFields{Tools: []toolIn{{Type: "code_interpreter"}}}, param: "tools[0].type"},
	}
	for _, c := range cases {
		tp, e := c.f.toolPlan()
		switch {
		case c.param != "":
			if e == nil || e.Param != c.param {
				t.Errorf("%s: got %+v, want a 400 naming %s", c.name, e, c.param)
			}
		case e != nil:
			t.Errorf("%s: %v", c.name, e.Message)
		case c.noPlan != (tp == nil):
			t.Errorf("%s: plan %+v", c.name, tp)
		case tp != nil && (tp.mode != c.mode || tp.named != c.named):
			t.Errorf("%s: mode %d named %q, want %d %q", c.name, tp.mode, tp.named, c.mode, c.named)
		}
	}
}

func TestToolCallsParsed(t *testing.T) {
	auto := &toolPlan{mode: toolsAuto, tools: weatherTools(), parallel: true}
	cases := []struct {
		text  string
		names []string
		args  []string
	}{
		{`{"name": "get_weather", "parameters": {"city": "Paris; France"}}`, []string{"get_weather"}, []string{`{"city":"Paris; France"}`}},
		{`<|python_tag|>{"name":"get_time","parameters":{}}; {"name":"get_weather","parameters":{"city":"Oslo"}}`, []string{"get_time", "get_weather"}, []string{`{}`, `{"city":"Oslo"}`}},
		{`<|tool_call|>[{"name":"get_weather","arguments":{"city":"Rome"}}]`, []string{"get_weather"}, []string{`{"city":"Rome"}`}},
		{"<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>\n<tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Lima\"}}</tool_call>", []string{"get_time", "get_weather"}, []string{`{}`, `{"city":"Lima"}`}},
		{`The weather is fine.`, nil, nil},
		{`{"name": "launch_rocket", "parameters": {}}`, nil, nil},
		{`{"name": "get_time", "parameters": {}} and more`, nil, nil},
		{`<tool_call>{"name":"get_time","arguments":{}}`, nil, nil},
		{`[]`, nil, nil},
	}
	for _, c := range cases {
		calls, ok := auto.calls(c.text)
		if ok != (c.names != nil) || len(calls) != len(c.names) {
			t.Errorf("%q: got %+v %v", c.text, calls, ok)
			continue
		}
		for i, call := range calls {
			if call.Function.Name != c.names[i] || call.Function.Arguments != c.args[i] || call.Type != "function" || len(call.ID) < 10 {
				t.Errorf("%q: call %d is %+v", c.text, i, call)
			}
		}
	}
	named := &toolPlan{mode: toolsNamed, tools: weatherTools(), named: "get_weather"}
	if calls, ok := named.calls(`{"city": "Bern"}`); !ok || calls[0].Function.Name != "get_weather" || calls[0].Function.Arguments != `{"city":"Bern"}` {
		t.Errorf("named: %+v %v", calls, ok)
	}
	if _, ok := (&toolPlan{mode: toolsNone, tools: weatherTools()}).calls(`{"name":"get_time","parameters":{}}`); ok {
		t.Error("tool_choice none parsed a call")
	}
}

func TestRequiredSchema(t *testing.T) {
	for _, parallel := range []bool{true, false} {
		tp := &toolPlan{mode: toolsRequired, tools: weatherTools(), parallel: parallel}
		var s struct {
			Defs     map[string]json.RawMessage `json:"$defs"`
			Type     string
			MinItems int
			MaxItems *int
			Items    struct {
				AnyOf []struct {
					Properties struct {
						Name       struct{ Const string }
						Parameters struct {
							Ref string `json:"$ref"`
						}
					}
					Required []string
				}
			}
		}
		if err := json.Unmarshal(tp.constraint().JSON, &s); err != nil {
			t.Fatal(err)
		}
		if s.Type != "array" || s.MinItems != 1 || (s.MaxItems != nil) == parallel || len(s.Items.AnyOf) != 2 ||
			s.Items.AnyOf[1].Properties.Name.Const != "get_time" || s.Items.AnyOf[0].Properties.Parameters.Ref != "#/$defs/tool0" ||
			string(s.Defs["tool0"]) != string(weatherTools()[0].Function.Parameters) {
			t.Errorf("parallel=%v: %s", parallel, tp.constraint().JSON)
		}
	}
}

// TestRequiredSchemaKeepsRefs: a tool's own references ($defs, as
// pydantic writes nested models, and "#") still resolve inside the calls
// schema, key order kept; the request compiles and reaches rank 0.
func TestRequiredSchemaKeepsRefs(t *testing.T) {
	params := `{"$defs":{"Loc":{"type":"object","properties":{"city":{"type":"string"},"near":{"anyOf":[{"$ref":"#"},{"type":"null"}]}},"required":["city","near"]}},` +
		`"type":"object","properties":{"where":{"$ref":"#/$defs/Loc"},"days":{"type":"integer"}},"required":["where","days"]}`
	var b bytes.Buffer
	if err := rebaseRefs(&b, []byte(params), "#/$defs/tool3"); err != nil {
		t.Fatal(err)
	}
	want := strings.NewReplacer(`"#/$defs/Loc"`, `"#/$defs/tool3/$defs/Loc"`, `"#"`, `"#/$defs/tool3"`).Replace(params)
	if b.String() != want {
		t.Fatalf("rebased:\n%s\nwant\n%s", b.String(), want)
	}
	g, f := newTestGateway(t, `[{"name":"find","parameters":{"where":{"city":"x","near":null},"days":1}}]`, nil, WithTokenizer(byteTokenizer{template: true}))
	srv := serve(t, g)
	resp := post(t, srv, "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"tool_choice":"required",`+
		`"tools":[{"type":"function","function":{"name":"find","parameters":`+params+`}}]}`)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %+v", resp.StatusCode, decode[errorBody](t, resp).Error)
	}
	a := decode[chatAnswer](t, resp)
	if len(a.Choices[0].Message.ToolCalls) != 1 || len(f.requests()) != 1 {
		t.Fatalf("answer %+v", a)
	}
}

const weatherToolsJSON = `[{"type":"function","function":{"name":"get_weather","description":"Weather now","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}},` +
	`{"type":"function","function":{"name":"get_time","parameters":{"type":"object","properties":{}}}}]`

type chatAnswer struct {
	Choices []struct {
		Message struct {
			Content   *string    `json:"content"`
			ToolCalls []toolCall `json:"tool_calls"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
}

// toolChat posts a chat with the weather tools and fields, rank 0
// answering text, and returns the gateway's answer and what rank 0 got.
func toolChat(t *testing.T, text, fields string) (*http.Response, *fakeRank0) {
	t.Helper()
	g, f := newTestGateway(t, text, nil, WithTokenizer(byteTokenizer{template: true}))
	srv := serve(t, g)
	body := `{"messages":[{"role":"user","content":"weather?"}],"max_tokens":200,"tools":` + weatherToolsJSON
	if fields != "" {
		body += "," + fields
	}
	return post(t, srv, "/v1/chat/completions", body+"}"), f
}

// TestToolCallAnswers: the calls an output holds are answered as
// message.tool_calls with finish_reason tool_calls; "auto" sends no
// constraint and answers plain text as content; "required" and a named
// function constrain the output; the tools and the history's calls reach
// the template.
func TestToolCallAnswers(t *testing.T) {
	for _, c := range []struct {
		name, text, fields string
		calls              []string // name:arguments; none: content
		constrained        string   // a fragment of the schema rank 0 got; "": none
	}{
		{"auto call", `{"name": "get_weather", "parameters": {"city": "Oslo"}}`, "", []string{`get_weather:{"city":"Oslo"}`}, ""},
		{"auto text", `It is sunny.`, "", nil, ""},
		{"required", `[{"name":"get_time","parameters":{}},{"name":"get_weather","parameters":{"city":"Rome"}}]`, `"tool_choice":"required"`,
			[]string{`get_time:{}`, `get_weather:{"city":"Rome"}`}, `"minItems":1`},
		{"required one", `[{"name":"get_time","parameters":{}}]`, `"tool_choice":"required","parallel_tool_calls":false`, []string{`get_time:{}`}, `"maxItems":1`},
		{"named", `{"city":"Lima"}`, `"tool_choice":{"type":"function","function":{"name":"get_weather"}}`, []string{`get_weather:{"city":"Lima"}`}, `"required":["city"]`},
		{"none", `{"name": "get_time", "parameters": {}}`, `"tool_choice":"none"`, nil, ""},
	} {
		resp, f := toolChat(t, c.text, c.fields)
		if resp.StatusCode != 200 {
			t.Errorf("%s: status %d: %+v", c.name, resp.StatusCode, decode[errorBody](t, resp).Error)
			continue
		}
		a := decode[chatAnswer](t, resp)
		msg := a.Choices[0].Message
		var got []string
		for _, tc := range msg.ToolCalls {
			got = append(got, tc.Function.Name+":"+tc.Function.Arguments)
			if tc.Type != "function" || !strings.HasPrefix(tc.ID, "call_") {
				t.Errorf("%s: call %+v", c.name, tc)
			}
		}
		switch {
		case !equal(got, c.calls):
			t.Errorf("%s: calls %q, want %q", c.name, got, c.calls)
		case c.calls != nil && (msg.Content != nil || a.Choices[0].FinishReason != "tool_calls"):
			t.Errorf("%s: content %v, finish %s", c.name, msg.Content, a.Choices[0].FinishReason)
		case c.calls == nil && (msg.Content == nil || *msg.Content != c.text || a.Choices[0].FinishReason != "stop"):
			t.Errorf("%s: content %v, finish %s", c.name, msg.Content, a.Choices[0].FinishReason)
		}
		reqs := f.requests()
		so := reqs[0].StructuredOutputs
		if (so != nil) != (c.constrained != "") || so != nil && !strings.Contains(string(so.JSON), c.constrained) {
			t.Errorf("%s: rank 0 got structured outputs %+v", c.name, so)
		}
		if prompt := string(bytesOf(reqs[0].PromptTokenIDs)); !strings.Contains(prompt, "<tool get_weather><tool get_time>") && !strings.Contains(prompt, "<tool get_time><tool get_weather>") {
			t.Errorf("%s: the template got no tools: %q", c.name, prompt)
		}
	}
}

// TestToolCallStreams: streamed calls arrive as OpenAI's deltas: a named
// function's id and name first and its arguments as they come, the calls
// of "required" whole at the end; plain "auto" text streams as content.
func TestToolCallStreams(t *testing.T) {
	for _, c := range []struct {
		name, text, fields string
		wantCalls          []string
	}{
		{"named", `{"city":"Lima"}`, `"tool_choice":{"type":"function","function":{"name":"get_weather"}}`, []string{`get_weather:{"city":"Lima"}`}},
		{"required", `[{"name":"get_time","parameters":{}}]`, `"tool_choice":"required"`, []string{`get_time:{}`}},
		{"auto text", `Sunny.`, "", nil},
	} {
		fields := `"stream":true`
		if c.fields != "" {
			fields += "," + c.fields
		}
		resp, _ := toolChat(t, c.text, fields)
		var names, args, content []string
		var ids []string
		finish := ""
		for _, ev := range events(t, resp) {
			var ch struct {
				Choices []struct {
					Delta struct {
						Content   *string    `json:"content"`
						ToolCalls []toolCall `json:"tool_calls"`
					} `json:"delta"`
					FinishReason *string `json:"finish_reason"`
				} `json:"choices"`
			}
			if err := json.Unmarshal([]byte(ev), &ch); err != nil || len(ch.Choices) == 0 {
				continue
			}
			d := ch.Choices[0]
			if d.Delta.Content != nil && *d.Delta.Content != "" {
				content = append(content, *d.Delta.Content)
			}
			for _, tc := range d.Delta.ToolCalls {
				if tc.Index == nil {
					t.Errorf("%s: a delta without index", c.name)
					continue
				}
				for len(args) <= *tc.Index {
					args, names, ids = append(args, ""), append(names, ""), append(ids, "")
				}
				args[*tc.Index] += tc.Function.Arguments
				names[*tc.Index] += tc.Function.Name
				ids[*tc.Index] += tc.ID
			}
			if d.FinishReason != nil {
				finish = *d.FinishReason
			}
		}
		var got []string
		for i := range names {
			got = append(got, names[i]+":"+args[i])
			if !strings.HasPrefix(ids[i], "call_") {
				t.Errorf("%s: call %d id %q", c.name, i, ids[i])
			}
		}
		if c.wantCalls != nil {
			if !equal(got, c.wantCalls) || len(content) != 0 || finish != "tool_calls" {
				t.Errorf("%s: calls %q content %q finish %s", c.name, got, content, finish)
			}
		} else if strings.Join(content, "") != c.text || len(got) != 0 || finish != "stop" {
			t.Errorf("%s: content %q calls %q finish %s", c.name, content, got, finish)
		}
	}
}

// TestToolHistoryReachesTheTemplate: an assistant message's calls (its
// arguments decoded) and a tool message go to the template; arguments
// that are not JSON are refused naming them.
func TestToolHistoryReachesTheTemplate(t *testing.T) {
	g, f := newTestGateway(t, "ok", nil, WithTokenizer(byteTokenizer{template: true}))
	srv := serve(t, g)
	hist := `"messages":[{"role":"user","content":"weather?"},` +
		`{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Oslo\"}"}}]},` +
		`{"role":"tool","tool_call_id":"call_1","content":"12 C"}]`
	resp := post(t, srv, "/v1/chat/completions", `{`+hist+`,"tools":`+weatherToolsJSON+`}`)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %+v", resp.StatusCode, decode[errorBody](t, resp).Error)
	}
	resp.Body.Close()
	prompt := string(bytesOf(f.requests()[0].PromptTokenIDs))
	if !strings.Contains(prompt, `<call call_1 get_weather>{"city":"Oslo"}`) || !strings.Contains(prompt, "<tool>12 C") {
		t.Errorf("prompt %q", prompt)
	}
	bad := strings.Replace(hist, `{\"city\": \"Oslo\"}`, `{city`, 1)
	resp = post(t, srv, "/v1/chat/completions", `{`+bad+`}`)
	if e := decode[errorBody](t, resp); resp.StatusCode != 400 || e.Error.Param == nil || *e.Error.Param != "messages[1].tool_calls[0].function.arguments" {
		t.Errorf("arguments not JSON: %d %+v", resp.StatusCode, e.Error)
	}
	resp, _ = toolChat(t, "x", `"tool_choice":"required","response_format":{"type":"json_object"}`)
	if e := decode[errorBody](t, resp); resp.StatusCode != 400 || e.Error.Param == nil || *e.Error.Param != "tool_choice" {
		t.Errorf("required with response_format: %d %+v", resp.StatusCode, e.Error)
	}
}
