package gateway

// Tokenizer turns text into token IDs and back. coordinator/gateway/tokenizer
// provides one (FromTokenizer adapts it); tests may fake it.
type Tokenizer interface {
	Name() string
	// VocabSize is the highest token ID + 1.
	VocabSize() int
	Encode(text string, addSpecial bool) ([]int32, error)
	Decode(ids []int32) (string, error)
	// NewDetokenizer returns a streaming decoder for one sequence.
	NewDetokenizer() Detokenizer
	HasChatTemplate() bool
	// EncodeChat renders msgs with the chat template and encodes the
	// prompt: the template's special tokens as their ids, special tokens
	// written in the messages as plain text. addSpecial adds what the
	// tokenizer adds around a sequence (BOS), which templates write
	// themselves.
	EncodeChat(msgs []ChatMessage, addGenerationPrompt, addSpecial bool) ([]int32, error)
}

// Detokenizer decodes one sequence a token at a time.
type Detokenizer interface {
	// Add returns the text that token completes: never part of a
	// UTF-8 character.
	Add(id int32) (string, error)
	// Flush returns what is left once the sequence ended.
	Flush() string
}

// ChatMessage is one message of a chat, as the template receives it.
type ChatMessage struct {
	Role, Content string
}
