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
	if t.chat == nil {
		return "", ErrNoChatTemplate
	}
	list := make([]map[string]any, len(msgs))
	for i, m := range msgs {
		list[i] = map[string]any{"role": m.Role, "content": m.Content}
	}
	var raised error
	ctx := exec.NewContext(map[string]any{
		"messages":              list,
		"add_generation_prompt": addGenerationPrompt,
		"bos_token":             t.chat.bos,
		"eos_token":             t.chat.eos,
		"raise_exception": func(msg string) (string, error) {
			raised = errors.New(msg)
			return "", raised
		},
	})
	out, err := t.chat.tpl.ExecuteToString(ctx)
	switch {
	case raised != nil:
		return "", fmt.Errorf("chat template: %w", raised)
	case err != nil:
		return "", fmt.Errorf("chat template: %w", err)
	}
	return out, nil
}
