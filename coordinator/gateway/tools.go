package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/tpcoord/tpcoord/broadcast/api"
)

// Tool calling (docs/http-api.md, "Tools"). The tools go to the chat
// template, as Hugging Face templates expect them. With tool_choice
// "required" or a named function, decoding is constrained as vLLM
// constrains it: a named function's output is its arguments, a JSON value
// of its parameters schema; "required" outputs a JSON array of
// {"name": …, "parameters": …} calls, at least one (exactly one without
// parallel_tool_calls). With "auto" the model's own tool-call format is
// parsed from its output; "none" calls nothing.

// MaxTools bounds the tools of a request.
const MaxTools = 128

type toolIn struct {
	Type     string      `json:"type"`
	Function *functionIn `json:"function"`
}

type functionIn struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	Strict      *bool           `json:"strict"`
}

// toolFields are the chat request's tool fields.
type toolFields struct {
	Tools             []toolIn        `json:"tools"`
	ToolChoice        json.RawMessage `json:"tool_choice"`
	ParallelToolCalls *bool           `json:"parallel_tool_calls"`
}

type toolMode int

const (
	toolsNone toolMode = iota
	toolsAuto
	toolsRequired
	toolsNamed
)

// toolPlan is what a request's tool fields ask for.
type toolPlan struct {
	mode     toolMode
	tools    []toolIn
	named    string // toolsNamed: the function
	parallel bool
}

// toolPlan checks the tool fields. A request without tools has none
// (nil); tool_choice defaults to auto with tools, as OpenAI's.
func (f *toolFields) toolPlan() (*toolPlan, *apiError) {
	choice := bytes.TrimSpace(f.ToolChoice)
	if len(f.Tools) == 0 {
		if len(choice) > 0 && string(choice) != `"none"` && string(choice) != "null" {
			return nil, badRequest("tool_choice", "needs tools")
		}
		return nil, nil
	}
	if len(f.Tools) > MaxTools {
		return nil, badRequest("tools", "has %d tools, at most %d", len(f.Tools), MaxTools)
	}
	tp := &toolPlan{mode: toolsAuto, tools: f.Tools, parallel: f.ParallelToolCalls == nil || *f.ParallelToolCalls}
	names := map[string]bool{}
	for i, t := range f.Tools {
		if e := checkTool(i, t, names); e != nil {
			return nil, e
		}
	}
	if e := tp.choose(choice, names); e != nil {
		return nil, e
	}
	return tp, nil
}

func checkTool(i int, t toolIn, names map[string]bool) *apiError {
	field := fmt.Sprintf("tools[%d]", i)
	switch {
	case t.Type != "function":
		return badRequest(field+".type", "%q is not supported: only function tools", t.Type)
	case t.Function == nil || t.Function.Name == "":
		return badRequest(field+".function.name", "is required")
	case names[t.Function.Name]:
		return badRequest(field+".function.name", "%q is given twice", t.Function.Name)
	case len(bytes.TrimSpace(t.Function.Parameters)) == 0 || string(bytes.TrimSpace(t.Function.Parameters)) == "null":
		return badRequest(field+".function.parameters", `is required: a JSON Schema of the arguments (for none, {"type":"object","properties":{}})`)
	}
	names[t.Function.Name] = true
	return nil
}

// choose reads tool_choice: "none", "auto", "required" or
// {"type":"function","function":{"name":…}}.
func (tp *toolPlan) choose(choice []byte, names map[string]bool) *apiError {
	var word string
	if len(choice) == 0 || string(choice) == "null" {
		return nil
	}
	if json.Unmarshal(choice, &word) == nil {
		m, ok := map[string]toolMode{"none": toolsNone, "auto": toolsAuto, "required": toolsRequired}[word]
		if !ok {
			return badRequest("tool_choice", "%q: use none, auto, required or a named function", word)
		}
		tp.mode = m
		return nil
	}
	var named struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	dec := json.NewDecoder(bytes.NewReader(choice))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&named); err != nil || named.Type != "function" {
		return badRequest("tool_choice", `must be "none", "auto", "required" or {"type":"function","function":{"name":…}}`)
	}
	if !names[named.Function.Name] {
		return badRequest("tool_choice.function.name", "%q is not one of the tools", named.Function.Name)
	}
	tp.mode, tp.named = toolsNamed, named.Function.Name
	return nil
}

// constraint is the structured output that tool_choice required or a
// named function decodes under; nil for none and auto.
func (tp *toolPlan) constraint() *api.StructuredOutputs {
	switch tp.mode {
	case toolsNamed:
		return &api.StructuredOutputs{JSON: tp.function(tp.named).Parameters}
	case toolsRequired:
		return &api.StructuredOutputs{JSON: tp.callsSchema()}
	}
	return nil
}

func (tp *toolPlan) function(name string) *functionIn {
	for _, t := range tp.tools {
		if t.Function.Name == name {
			return t.Function
		}
	}
	return nil
}

// callsSchema is the JSON Schema of "required": an array of calls, each
// one of the tools with its parameters. Each tool's parameters schema sits
// under $defs as tool<i>, its own references ("#", "#/$defs/…") rewritten
// to point there, so that a schema with $defs (pydantic's nested models)
// means the same inside the calls schema as alone.
func (tp *toolPlan) callsSchema() json.RawMessage {
	var b bytes.Buffer
	b.WriteString(`{"$defs":{`)
	for i, t := range tp.tools {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"tool%d":`, i)
		if err := rebaseRefs(&b, t.Function.Parameters, fmt.Sprintf("#/$defs/tool%d", i)); err != nil {
			b.Write(bytes.TrimSpace(t.Function.Parameters)) // not JSON: the grammar says why
		}
	}
	b.WriteString(`},"type":"array","minItems":1,`)
	if !tp.parallel {
		b.WriteString(`"maxItems":1,`)
	}
	b.WriteString(`"items":{"anyOf":[`)
	for i, t := range tp.tools {
		if i > 0 {
			b.WriteByte(',')
		}
		name, _ := json.Marshal(t.Function.Name)
		fmt.Fprintf(&b, `{"type":"object","properties":{"name":{"const":%s},"parameters":{"$ref":"#/$defs/tool%d"}},"required":["name","parameters"],"additionalProperties":false}`,
			name, i)
	}
	b.WriteString(`]}}`)
	return b.Bytes()
}

// rebaseRefs writes schema to b, token by token (keys keep their order),
// with every "$ref" that points into it ("#…") made to point under base.
func rebaseRefs(b *bytes.Buffer, schema []byte, base string) error {
	dec := json.NewDecoder(bytes.NewReader(schema))
	dec.UseNumber()
	var stack []bool // per open container: true for an object
	first, key, ref := true, true, false
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		inObject := len(stack) > 0 && stack[len(stack)-1]
		if d, ok := tok.(json.Delim); ok && (d == '}' || d == ']') {
			b.WriteRune(rune(d))
			stack = stack[:len(stack)-1]
			first, key = false, len(stack) > 0 && stack[len(stack)-1]
			continue
		}
		if !first {
			if inObject && key {
				b.WriteByte(',')
			} else if inObject {
				b.WriteByte(':')
			} else {
				b.WriteByte(',')
			}
		}
		first = false
		switch v := tok.(type) {
		case json.Delim:
			b.WriteRune(rune(v))
			stack = append(stack, v == '{')
			first, key = true, v == '{'
			continue
		case string:
			if inObject && !key && ref && strings.HasPrefix(v, "#") {
				v = base + v[1:]
			}
			ref = inObject && key && v == "$ref"
			s, _ := json.Marshal(v)
			b.Write(s)
		default:
			s, _ := json.Marshal(v)
			b.Write(s)
			ref = false
		}
		if inObject {
			key = !key
		}
	}
}

// toolCall is one call of an answer, as OpenAI's.
type toolCall struct {
	Index    *int         `json:"index,omitempty"` // streamed deltas only
	ID       string       `json:"id,omitempty"`
	Type     string       `json:"type,omitempty"`
	Function toolFunction `json:"function"`
}

type toolFunction struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

// calls reads the tool calls out of an output: the arguments of a named
// function, the array of "required", or, with auto, the model's own
// format (Llama 3's {"name","parameters"} objects, optionally after
// <|python_tag|> and separated by ';', Granite's <|tool_call|>[…], and
// <tool_call>…</tool_call> blocks). ok is false when the output holds no
// call of a known tool: it is then plain content.
func (tp *toolPlan) calls(text string) (out []toolCall, ok bool) {
	switch tp.mode {
	case toolsNone:
		return nil, false
	case toolsNamed:
		args, err := compactJSON(text)
		if err != nil {
			return nil, false
		}
		return []toolCall{newToolCall(tp.named, args)}, true
	}
	objs, ok := toolObjects(text)
	if !ok {
		return nil, false
	}
	for _, o := range objs {
		if tp.function(o.Name) == nil {
			return nil, false
		}
		args := o.Parameters
		if len(args) == 0 {
			args = o.Arguments
		}
		c, err := compactJSON(string(args))
		if err != nil {
			return nil, false
		}
		out = append(out, newToolCall(o.Name, c))
	}
	return out, len(out) > 0
}

func newToolCall(name, args string) toolCall {
	return toolCall{ID: "call_" + newID(), Type: "function", Function: toolFunction{Name: name, Arguments: args}}
}

type toolObject struct {
	Name       string          `json:"name"`
	Parameters json.RawMessage `json:"parameters"`
	Arguments  json.RawMessage `json:"arguments"`
}

// toolObjects parses the call objects of an output in one of the
// formats calls reads: JSON objects or arrays of them, one after another
// (separated by ';' or nothing), or <tool_call> blocks.
func toolObjects(text string) ([]toolObject, bool) {
	s := strings.TrimSpace(text)
	for _, p := range []string{"<|python_tag|>", "<|tool_call|>"} {
		s = strings.TrimSpace(strings.TrimPrefix(s, p))
	}
	if strings.HasPrefix(s, "<tool_call>") {
		var b strings.Builder
		for _, blk := range strings.Split(s, "<tool_call>")[1:] {
			body, rest, closed := strings.Cut(blk, "</tool_call>")
			if !closed || strings.TrimSpace(rest) != "" {
				return nil, false
			}
			b.WriteString(body)
		}
		s = b.String()
	}
	var out []toolObject
	for s = strings.TrimSpace(s); s != ""; s = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(s), ";")) {
		dec := json.NewDecoder(strings.NewReader(s))
		var raw json.RawMessage
		if dec.Decode(&raw) != nil {
			return nil, false
		}
		s = s[dec.InputOffset():]
		var many []toolObject
		if raw[0] == '[' && json.Unmarshal(raw, &many) == nil {
			out = append(out, many...)
			continue
		}
		var one toolObject
		if json.Unmarshal(raw, &one) != nil || one.Name == "" {
			return nil, false
		}
		out = append(out, one)
	}
	return out, len(out) > 0
}

func compactJSON(s string) (string, error) {
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(strings.TrimSpace(s))); err != nil {
		return "", err
	}
	return b.String(), nil
}

// finishToolCalls is the finish reason of an answer that calls tools.
const finishToolCalls = "tool_calls"

// toolCallIn is a call of an assistant message in a request's history.
type toolCallIn struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// chat is the call as the template gets it, arguments decoded (vLLM and
// the transformers library pass them decoded; templates index them or
// write them with tojson).
func (c *toolCallIn) chat(msg, j int) (ChatToolCall, *apiError) {
	var args any
	if a := strings.TrimSpace(c.Function.Arguments); a != "" {
		if err := json.Unmarshal([]byte(a), &args); err != nil {
			return ChatToolCall{}, badRequest(fmt.Sprintf("messages[%d].tool_calls[%d].function.arguments", msg, j), "is not JSON: %v", err)
		}
	}
	if c.Function.Name == "" {
		return ChatToolCall{}, badRequest(fmt.Sprintf("messages[%d].tool_calls[%d].function.name", msg, j), "is required")
	}
	return ChatToolCall{ID: c.ID, Name: c.Function.Name, Arguments: args}, nil
}

// templateTools are the tools as the chat template gets them (nil for a
// plan without tools).
func (tp *toolPlan) templateTools() []ChatTool {
	if tp == nil {
		return nil
	}
	out := make([]ChatTool, len(tp.tools))
	for i, t := range tp.tools {
		var params any
		_ = json.Unmarshal(t.Function.Parameters, &params) // checked: the request decoded
		out[i] = ChatTool{Name: t.Function.Name, Description: t.Function.Description, Parameters: params}
	}
	return out
}

// toolsPlan takes the request's tools into pl: the plan, and the
// constraint that tool_choice required or a named function decodes under.
func (g *Gateway) toolsPlan(f *toolFields, pl *plan) *apiError {
	tp, e := f.toolPlan()
	if e != nil || tp == nil {
		return e
	}
	pl.tools = tp
	so := tp.constraint()
	if so == nil {
		return nil
	}
	if pl.base.StructuredOutputs != nil {
		return badRequest("tool_choice", "a required or named tool call constrains the output, and so does the request's structured output: give one")
	}
	field := "tools"
	if tp.mode == toolsNamed {
		field = fmt.Sprintf("tools[%d].function.parameters", tp.index(tp.named))
	}
	return g.constrain(so, field, pl)
}

func (tp *toolPlan) index(name string) int {
	for i, t := range tp.tools {
		if t.Function.Name == name {
			return i
		}
	}
	return -1
}

// toolStreams turns a streamed chat's text into tool-call deltas. A named
// function's arguments stream as they come; the calls of "required", and
// an "auto" output that may be a call (it begins with '{', '[' or '<'),
// are held until the output ends, then sent whole, or sent as text if
// they are no call after all.
type toolStreams struct {
	plan *toolPlan
	mu   sync.Mutex // choices stream from goroutines of their own
	by   map[int]*toolStream
}

type toolStream struct {
	started bool // a named call's header is sent
	plain   bool // auto: the output is text, streamed as it comes
	held    strings.Builder
}

func newToolStreams(tp *toolPlan) *toolStreams {
	if tp == nil || tp.mode == toolsNone {
		return nil
	}
	return &toolStreams{plan: tp, by: map[int]*toolStream{}}
}

// parse reads the calls of a whole answer that ended with reason.
func (t *toolStreams) parse(text, reason string) ([]toolCall, bool) {
	if t == nil || reason == api.FinishError {
		return nil, false
	}
	return t.plan.calls(text)
}

// delta returns what choice i's chunk carries for text: content, tool-call
// deltas, and the finish reason (for the final chunk).
func (t *toolStreams) delta(i int, text string, final bool, reason string) (string, []toolCall, string) {
	if t == nil {
		return text, nil, reason
	}
	t.mu.Lock()
	s := t.by[i]
	if s == nil {
		s = &toolStream{}
		t.by[i] = s
	}
	t.mu.Unlock()
	if t.plan.mode == toolsNamed {
		return "", s.named(t.plan.named, text, final), namedReason(final, reason)
	}
	if s.plain {
		return text, nil, reason
	}
	s.held.WriteString(text)
	held := strings.TrimLeft(s.held.String(), " \t\r\n")
	if t.plan.mode == toolsAuto && held != "" && !strings.ContainsAny(held[:1], "{[<") {
		s.plain = true
		return s.held.String(), nil, reason
	}
	if !final {
		return "", nil, reason
	}
	calls, ok := t.parse(s.held.String(), reason)
	if !ok {
		return s.held.String(), nil, reason
	}
	for j := range calls {
		calls[j].Index = &j
	}
	return "", calls, finishToolCalls
}

// named is the delta of a named function's call: its header with the
// first arguments, then arguments.
func (s *toolStream) named(name, text string, final bool) []toolCall {
	zero := 0
	if !s.started {
		s.started = true
		c := newToolCall(name, text)
		c.Index = &zero
		return []toolCall{c}
	}
	if text == "" {
		return nil
	}
	return []toolCall{{Index: &zero, Function: toolFunction{Arguments: text}}}
}

// namedReason: a named call that ended at its grammar's end ended with a
// call; one cut short keeps its reason (length, an error).
func namedReason(final bool, reason string) string {
	if final && reason == api.FinishStop {
		return finishToolCalls
	}
	return reason
}
