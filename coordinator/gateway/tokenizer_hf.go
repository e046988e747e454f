package gateway

import "github.com/tpcoord/tpcoord/coordinator/gateway/tokenizer"

// FromTokenizer adapts coordinator/gateway/tokenizer's Tokenizer.
func FromTokenizer(t *tokenizer.Tokenizer) Tokenizer { return hfTokenizer{t} }

type hfTokenizer struct{ *tokenizer.Tokenizer }

func (h hfTokenizer) NewDetokenizer() Detokenizer { return h.NewStream() }

func (h hfTokenizer) EncodeChat(msgs []ChatMessage, addGenerationPrompt, addSpecial bool) ([]int32, error) {
	m := make([]tokenizer.ChatMessage, len(msgs))
	for i, x := range msgs {
		m[i] = tokenizer.ChatMessage{Role: x.Role, Content: x.Content}
	}
	return h.Tokenizer.EncodeChat(m, addGenerationPrompt, addSpecial)
}
