package gateway

import "github.com/tpcoord/tpcoord/coordinator/gateway/tokenizer"

// FromTokenizer adapts coordinator/gateway/tokenizer's Tokenizer.
func FromTokenizer(t *tokenizer.Tokenizer) Tokenizer { return hfTokenizer{t} }

type hfTokenizer struct{ *tokenizer.Tokenizer }

func (h hfTokenizer) NewDetokenizer() Detokenizer { return h.NewStream() }

func (h hfTokenizer) EncodeChat(msgs []ChatMessage, tools []ChatTool, addGenerationPrompt, addSpecial bool) ([]int32, error) {
	m := make([]tokenizer.ChatTurn, len(msgs))
	for i, x := range msgs {
		m[i] = tokenizer.ChatTurn{ChatMessage: tokenizer.ChatMessage{Role: x.Role, Content: x.Content}, Name: x.Name, ToolCallID: x.ToolCallID}
		for _, c := range x.ToolCalls {
			m[i].ToolCalls = append(m[i].ToolCalls, tokenizer.ToolCall{ID: c.ID, Name: c.Name, Arguments: c.Arguments})
		}
	}
	t := make([]tokenizer.ChatTool, len(tools))
	for i, x := range tools {
		t[i] = tokenizer.ChatTool{Name: x.Name, Description: x.Description, Parameters: x.Parameters}
	}
	return h.EncodeChatTools(m, t, addGenerationPrompt, addSpecial)
}
