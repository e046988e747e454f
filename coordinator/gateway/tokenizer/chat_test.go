package tokenizer

import (
	"strings"
	"testing"
)

var chat = []ChatMessage{{"system", "Be brief."}, {"user", " Hi there "}, {"assistant", "Hello!"}, {"user", "日本?"}}

func TestFixtureChatTemplate(t *testing.T) {
	tk := loadFixture(t)
	got, err := tk.ApplyChatTemplate(chat[:2], true)
	want := "<s><|system|>\nBe brief.</s>\n<|user|>\nHi there</s>\n<|assistant|>\n"
	if err != nil || got != want {
		t.Fatalf("got %q, %v\nwant %q", got, err, want)
	}
	got, _ = tk.ApplyChatTemplate(chat[:2], false)
	if want := strings.TrimSuffix(want, "<|assistant|>\n"); got != want {
		t.Errorf("without generation prompt: %q, want %q", got, want)
	}
	// The rendered prompt encodes its markers as their special ids.
	ids, err := tk.Encode(got, false)
	if err != nil || ids[0] != 1 || ids[1] != tk.vocabID(t, "<|system|>") {
		t.Errorf("prompt ids %v, %v", ids, err)
	}
	_, err = tk.ApplyChatTemplate([]ChatMessage{{"tool", "x"}}, true)
	if err == nil || err.Error() != "chat template: unknown role: tool" {
		t.Errorf("raise_exception: err %v", err)
	}
}

// Templates in the style of real checkpoints' tokenizer_config.json.
const (
	llama3Template  = `{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}`
	chatMLTemplate  = `{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}`
	mistralTemplate = `{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}`
	graniteTemplate = `{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set system_message = "Knowledge Cutoff Date: April 2024.\nYou are Granite, developed by IBM." %}
    {%- set loop_messages = messages %}
{%- endif %}
{{- '<|start_of_role|>system<|end_of_role|>' + system_message + '<|end_of_text|>\n' }}
{%- for message in loop_messages %}
    {{- '<|start_of_role|>' + message['role'] + '<|end_of_role|>' + message['content'] + '<|end_of_text|>\n' }}
    {%- if loop.last and add_generation_prompt %}
        {{- '<|start_of_role|>assistant<|end_of_role|>' }}
    {%- endif %}
{%- endfor %}`
)

func TestRealTemplates(t *testing.T) {
	cases := []struct {
		name, src string
		msgs      []ChatMessage
		want      string
	}{
		{"llama3", llama3Template, chat[1:], "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>" +
			"<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n日本?<|eot_id|>" +
			"<|start_header_id|>assistant<|end_header_id|>\n\n"},
		{"chatml", chatMLTemplate, chat[:2], "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n Hi there <|im_end|>\n<|im_start|>assistant\n"},
		{"mistral", mistralTemplate, chat[1:], "<|begin_of_text|>[INST]  Hi there  [/INST]Hello!<|eot_id|>[INST] 日本? [/INST]"},
		{"granite", graniteTemplate, chat[:2], "<|start_of_role|>system<|end_of_role|>Be brief.<|end_of_text|>\n" +
			"<|start_of_role|>user<|end_of_role|> Hi there <|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|>"},
		{"granite-default", graniteTemplate, chat[3:], "<|start_of_role|>system<|end_of_role|>Knowledge Cutoff Date: April 2024.\n" +
			"You are Granite, developed by IBM.<|end_of_text|>\n<|start_of_role|>user<|end_of_role|>日本?<|end_of_text|>\n" +
			"<|start_of_role|>assistant<|end_of_role|>"},
	}
	for _, c := range cases {
		tpl, err := newChatTemplate(c.src, "<|begin_of_text|>", "<|eot_id|>")
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		tk := &Tokenizer{chat: tpl}
		got, err := tk.ApplyChatTemplate(c.msgs, true)
		if err != nil || got != c.want {
			t.Errorf("%s: got %q, %v\nwant %q", c.name, got, err, c.want)
		}
	}
	tpl, _ := newChatTemplate(mistralTemplate, "<s>", "</s>")
	_, err := (&Tokenizer{chat: tpl}).ApplyChatTemplate(chat[:1], true)
	if err == nil || err.Error() != "chat template: Conversation roles must alternate user/assistant/user/assistant/..." {
		t.Errorf("mistral with a system message: err %v", err)
	}
}

func TestTemplateCannotInclude(t *testing.T) {
	tpl, err := newChatTemplate(`{% include "/etc/passwd" %}`, "", "")
	if err == nil {
		_, err = (&Tokenizer{chat: tpl}).ApplyChatTemplate(chat, true)
	}
	if err == nil || !strings.Contains(err.Error(), "cannot include") {
		t.Errorf("include: err %v", err)
	}
}
