package tokenizer

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/nikolalohinski/gonja/v2"
	"github.com/nikolalohinski/gonja/v2/config"
	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/loaders"
)

// ChatMessage is one message of a chat: a role ("system", "user",
// "assistant", ...) and its text.
type ChatMessage struct{ Role, Content string }

// ChatTurn is a message with what tool calling adds to it: an assistant
// message's calls (its content may then be empty, passed as none), a tool
// message's call ID, and a name.
type ChatTurn struct {
	ChatMessage
	Name, ToolCallID string
	ToolCalls        []ToolCall
}

// ToolCall is a call of an assistant message. Arguments is the decoded
// JSON value (templates index it or write it with tojson), as vLLM and
// the transformers library pass it.
type ToolCall struct {
	ID, Name  string
	Arguments any
}

// ChatTool is a function the model may call; Parameters is its decoded
// JSON Schema.
type ChatTool struct {
	Name, Description string
	Parameters        any
}

// ErrNoChatTemplate is ApplyChatTemplate's error for a tokenizer without
// a chat template.
var ErrNoChatTemplate = errors.New("the tokenizer has no chat template (tokenizer_config.json has no chat_template)")

// chatTemplate is a parsed Jinja chat template, rendered as the
// transformers library renders one: blocks trimmed and left-stripped.
type chatTemplate struct {
	tpl      *exec.Template
	src      string
	bos, eos string
}

// templateName is the only name the template's loader answers to: a chat
// template may not include or extend files.
const templateName = "chat_template"

type oneTemplate struct{ src string }

func (o oneTemplate) Read(path string) (io.Reader, error) {
	if path != templateName {
		return nil, fmt.Errorf("%q: a chat template cannot include other templates", path)
	}
	return strings.NewReader(o.src), nil
}
func (o oneTemplate) Resolve(path string) (string, error)    { return path, nil }
func (o oneTemplate) Inherit(string) (loaders.Loader, error) { return o, nil }

func newChatTemplate(src, bos, eos string) (*chatTemplate, error) {
	cfg := config.New()
	cfg.TrimBlocks = true
	cfg.LeftStripBlocks = true
	tpl, err := exec.NewTemplate(templateName, cfg, oneTemplate{src}, gonja.DefaultEnvironment)
	if err != nil {
		return nil, err
	}
	return &chatTemplate{tpl: tpl, src: src, bos: bos, eos: eos}, nil
}

// HasChatTemplate reports whether ApplyChatTemplate can render a chat.
func (t *Tokenizer) HasChatTemplate() bool { return t.chat != nil }

// ApplyChatTemplate renders msgs as the model's prompt text, to be
// encoded with addSpecial false (the template writes BOS itself).
// addGenerationPrompt ends it with the start of an assistant message. An
// error the template raises (raise_exception) is returned with its text.
func (t *Tokenizer) ApplyChatTemplate(msgs []ChatMessage, addGenerationPrompt bool) (string, error) {
	turns := make([]ChatTurn, len(msgs))
	for i, m := range msgs {
		turns[i] = ChatTurn{ChatMessage: m}
	}
	return t.applyChatTemplate(turns, nil, addGenerationPrompt)
}

// applyChatTemplate renders turns, with tools (the template's tools
// variable, left undefined when there are none).
func (t *Tokenizer) applyChatTemplate(turns []ChatTurn, tools []ChatTool, addGenerationPrompt bool) (string, error) {
	if t.chat == nil {
		return "", ErrNoChatTemplate
	}
	var raised error
	vars := map[string]any{
		"messages":              turnMaps(turns),
		"add_generation_prompt": addGenerationPrompt,
		"bos_token":             t.chat.bos,
		"eos_token":             t.chat.eos,
		"raise_exception": func(msg string) (string, error) {
			raised = errors.New(msg)
			return "", raised
		},
	}
	if len(tools) > 0 {
		vars["tools"] = toolMaps(tools)
	}
	ctx := exec.NewContext(vars)
	out, err := t.chat.tpl.ExecuteToString(ctx)
	switch {
	case raised != nil:
		return "", fmt.Errorf("chat template: %w", raised)
	case err != nil:
		return "", fmt.Errorf("chat template: %w", err)
	}
	return out, nil
}

// turnMaps are the messages as templates read them: OpenAI's shape, with
// tool calls' arguments decoded.
func turnMaps(turns []ChatTurn) []map[string]any {
	list := make([]map[string]any, len(turns))
	for i, m := range turns {
		msg := map[string]any{"role": m.Role, "content": m.Content}
		if m.Content == "" && len(m.ToolCalls) > 0 {
			msg["content"] = nil
		}
		if m.Name != "" {
			msg["name"] = m.Name
		}
		if m.ToolCallID != "" {
			msg["tool_call_id"] = m.ToolCallID
		}
		if len(m.ToolCalls) > 0 {
			calls := make([]any, len(m.ToolCalls))
			for j, c := range m.ToolCalls {
				calls[j] = map[string]any{"id": c.ID, "type": "function",
					"function": map[string]any{"name": c.Name, "arguments": c.Arguments}}
			}
			msg["tool_calls"] = calls
		}
		list[i] = msg
	}
	return list
}

// toolMaps are the tools as OpenAI's request carries them.
func toolMaps(tools []ChatTool) []any {
	out := make([]any, len(tools))
	for i, t := range tools {
		out[i] = map[string]any{"type": "function", "function": map[string]any{
			"name": t.Name, "description": t.Description, "parameters": t.Parameters}}
	}
	return out
}
