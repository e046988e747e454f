package gateway

import (
	"bytes"
	"encoding/json"
	"net/http"
	"time"

	"github.com/tpcoord/tpcoord/broadcast/api"
)

// chatRequest is the body of POST /v1/chat/completions.
type chatRequest struct {
	samplingFields
	Messages            []chatMessageIn `json:"messages"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Logprobs            bool            `json:"logprobs"`
	TopLogprobs         *int            `json:"top_logprobs"`
	// AddGenerationPrompt is vLLM's: end the prompt with the template's
	// assistant opening (default true).
	AddGenerationPrompt *bool `json:"add_generation_prompt"`
	toolFields
}

type chatMessageIn struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	Name       string          `json:"name"`
	ToolCalls  []toolCallIn    `json:"tool_calls"`
	ToolCallID string          `json:"tool_call_id"`
}

// text reads a message's content: a string, or a list of text parts.
func (m *chatMessageIn) text(i int) (string, *apiError) {
	c := bytes.TrimSpace(m.Content)
	var s string
	if len(c) == 0 || string(c) == "null" {
		return "", nil
	}
	if json.Unmarshal(c, &s) == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(c, &parts) != nil {
		return "", badRequest("messages", "message %d: content must be a string or a list of text parts", i)
	}
	var b bytes.Buffer
	for _, p := range parts {
		if p.Type != "text" {
			return "", badRequest("messages", "message %d: content part of type %q is not supported (text only)", i, p.Type)
		}
		b.WriteString(p.Text)
	}
	return b.String(), nil
}

// chatPlan checks a chat request and renders its prompt with the
// tokenizer's chat template.
func (g *Gateway) chatPlan(req *chatRequest) (*plan, *apiError) {
	if e := g.needChatTemplate("use /v1/completions"); e != nil {
		return nil, e
	}
	if req.MaxCompletionTokens != nil {
		req.MaxTokens = req.MaxCompletionTokens
	}
	pl := &plan{promptParam: "messages"}
	if e := req.sampling(pl, g.cfg.ChatMaxTokens, true); e != nil {
		return nil, e
	}
	if e := req.chatLogprobs(pl); e != nil {
		return nil, e
	}
	if e := g.structuredPlan(&req.samplingFields, pl); e != nil {
		return nil, e
	}
	if e := g.toolsPlan(&req.toolFields, pl); e != nil {
		return nil, e
	}
	// The template writes the special tokens (BOS too).
	ids, e := g.encodeChat(req.Messages, pl.tools.templateTools(), req.AddGenerationPrompt == nil || *req.AddGenerationPrompt, false)
	if e != nil {
		return nil, e
	}
	if len(ids) == 0 {
		return nil, badRequest("messages", "the rendered prompt encodes to no tokens")
	}
	pl.prompts = [][]int32{ids}
	return pl, g.checkPlan(pl)
}

// needChatTemplate refuses a chat when the gateway has no tokenizer with
// a chat template; instead says what to use.
func (g *Gateway) needChatTemplate(instead string) *apiError {
	if g.tok != nil && g.tok.HasChatTemplate() {
		return nil
	}
	why := "this gateway has no tokenizer (start it with --tokenizer)"
	if g.tok != nil {
		why = "the tokenizer " + g.tok.Name() + " carries no chat template (tokenizer_config.json's chat_template)"
	}
	return badRequest("messages", "chat completions need a tokenizer with a chat template: %s; %s", why, instead)
}

// encodeChat checks messages, renders them with the chat template and
// encodes the prompt. Special tokens written in a message are encoded as
// plain text, so that no message can open or close a turn; the template's
// own are special.
func (g *Gateway) encodeChat(in []chatMessageIn, tools []ChatTool, addGen, addSpecial bool) ([]int32, *apiError) {
	if len(in) == 0 {
		return nil, badRequest("messages", "must not be empty")
	}
	msgs := make([]ChatMessage, len(in))
	total := 0
	for i := range in {
		m := &in[i]
		if m.Role == "" {
			return nil, badRequest("messages", "message %d has no role", i)
		}
		text, e := m.text(i)
		if e != nil {
			return nil, e
		}
		msgs[i] = ChatMessage{Role: m.Role, Content: text, Name: m.Name, ToolCallID: m.ToolCallID}
		for j, c := range m.ToolCalls {
			call, e := c.chat(i, j)
			if e != nil {
				return nil, e
			}
			msgs[i].ToolCalls = append(msgs[i].ToolCalls, call)
			total += len(c.Function.Arguments)
		}
		total += len(text)
	}
	if total > MaxPromptBytes {
		return nil, badRequest("messages", "%d bytes of content, at most %d", total, MaxPromptBytes)
	}
	ids, err := g.tok.EncodeChat(msgs, tools, addGen, addSpecial)
	if err != nil {
		return nil, badRequest("messages", "the chat template refused them: %v", err)
	}
	return ids, nil
}

func (req *chatRequest) chatLogprobs(pl *plan) *apiError {
	if req.TopLogprobs != nil && !req.Logprobs {
		return badRequest("top_logprobs", "needs logprobs: true")
	}
	if !req.Logprobs {
		return nil
	}
	n := 0
	if req.TopLogprobs != nil {
		n = *req.TopLogprobs
	}
	if n < 0 || n > 20 {
		return badRequest("top_logprobs", "must be in [0, 20], got %d", n)
	}
	pl.logprobs, pl.base.Logprobs = &n, &n
	return nil
}

// The answer of /v1/chat/completions, with vLLM's token_ids.
type chatResponse struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []chatChoice `json:"choices"`
	Usage   *usage       `json:"usage,omitempty"`
}

type chatChoice struct {
	Index        int           `json:"index"`
	Message      *chatMessage  `json:"message,omitempty"`
	Delta        *chatMessage  `json:"delta,omitempty"`
	Logprobs     *chatLogprobs `json:"logprobs"`
	FinishReason *string       `json:"finish_reason"`
	TokenIDs     []int32       `json:"token_ids,omitempty"`
}

type chatMessage struct {
	Role      string     `json:"role,omitempty"`
	Content   *string    `json:"content,omitempty"`
	ToolCalls []toolCall `json:"tool_calls,omitempty"`
}

type chatLogprobs struct {
	Content []chatTokenLogprob `json:"content"`
}

type chatTokenLogprob struct {
	Token       string             `json:"token"`
	Logprob     float64            `json:"logprob"`
	Bytes       []int              `json:"bytes"`
	TopLogprobs []chatTokenLogprob `json:"top_logprobs,omitempty"`
}

type chatFormat struct {
	g       *Gateway
	id      string
	created int64
	logprob bool
	tools   *toolStreams // nil: no tools
}

func (f *chatFormat) envelope(object string, choices []chatChoice) *chatResponse {
	return &chatResponse{ID: f.id, Object: object, Created: f.created, Model: f.g.cfg.Model, Choices: choices}
}

func (f *chatFormat) opening(c *choice) any {
	empty := ""
	return f.envelope("chat.completion.chunk", []chatChoice{{Index: c.index, Delta: &chatMessage{Role: "assistant", Content: &empty}}})
}

func (f *chatFormat) chunk(c *choice, tokens []int32, text string, from int, final bool) any {
	ch := chatChoice{Index: c.index, Delta: &chatMessage{}, TokenIDs: tokens}
	reason := ""
	if final {
		reason = c.finishReason()
	}
	text, ch.Delta.ToolCalls, reason = f.tools.delta(c.index, text, final, reason)
	if text != "" {
		ch.Delta.Content = &text
	}
	if final {
		ch.FinishReason = &reason
	}
	if f.logprob && len(tokens) > 0 {
		ch.Logprobs = f.g.chatLogprobs(c, from, len(tokens))
	}
	return f.envelope("chat.completion.chunk", []chatChoice{ch})
}

func (f *chatFormat) response(choices []*choice, u usage) any {
	out := make([]chatChoice, len(choices))
	for i, c := range choices {
		r, text := c.finishReason(), c.text.String()
		msg := &chatMessage{Role: "assistant", Content: &text}
		if calls, ok := f.tools.parse(text, r); ok {
			msg.Content, msg.ToolCalls, r = nil, calls, finishToolCalls
		}
		out[i] = chatChoice{Index: c.index, Message: msg, FinishReason: &r, TokenIDs: nonNil(c.tokens)}
		if f.logprob {
			out[i].Logprobs = f.g.chatLogprobs(c, 0, len(c.tokens))
		}
	}
	resp := f.envelope("chat.completion", out)
	resp.Usage = &u
	return resp
}

func (f *chatFormat) usageChunk(u usage) any {
	resp := f.envelope("chat.completion.chunk", []chatChoice{})
	resp.Usage = &u
	return resp
}

func (g *Gateway) chatLogprobs(c *choice, from, n int) *chatLogprobs {
	lp := &chatLogprobs{Content: []chatTokenLogprob{}}
	for i := from; i < from+n; i++ {
		var l api.Logprobs
		if i < len(c.logprobs) {
			l = c.logprobs[i]
		}
		e := g.chatToken(c.tokens[i], float64(l.Logprob))
		e.TopLogprobs = []chatTokenLogprob{}
		for _, t := range l.Top {
			e.TopLogprobs = append(e.TopLogprobs, g.chatToken(t.Token, float64(t.Logprob)))
		}
		lp.Content = append(lp.Content, e)
	}
	return lp
}

func (g *Gateway) chatToken(id int32, logprob float64) chatTokenLogprob {
	s := g.tokenText(id)
	b := make([]int, len(s))
	for i := range len(s) {
		b[i] = int(s[i])
	}
	return chatTokenLogprob{Token: s, Logprob: logprob, Bytes: b}
}

func (g *Gateway) handleChat(w http.ResponseWriter, r *http.Request) {
	handle(g, w, r, g.chatPlan, func(pl *plan) format {
		return &chatFormat{g: g, id: "chatcmpl-" + newID(), created: time.Now().Unix(), logprob: pl.logprobs != nil, tools: newToolStreams(pl.tools)}
	})
}
