package gateway

import (
	"encoding/json"
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
			Type     string
			MinItems int
			MaxItems *int
			Items    struct {
				AnyOf []struct {
					Properties struct {
						Name       struct{ Const string }
						Parameters json.RawMessage
					}
					Required []string
				}
			}
		}
		if err := json.Unmarshal(tp.constraint().JSON, &s); err != nil {
			t.Fatal(err)
		}
		if s.Type != "array" || s.MinItems != 1 || (s.MaxItems != nil) == parallel || len(s.Items.AnyOf) != 2 ||
			s.Items.AnyOf[1].Properties.Name.Const != "get_time" || string(s.Items.AnyOf[0].Properties.Parameters) != string(weatherTools()[0].Function.Parameters) {
			t.Errorf("parallel=%v: %s", parallel, tp.constraint().JSON)
		}
	}
}
