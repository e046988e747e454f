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
	// tools, if any, go to the template as its tools variable.
	EncodeChat(msgs []ChatMessage, tools []ChatTool, addGenerationPrompt, addSpecial bool) ([]int32, error)
}

// Detokenizer decodes one sequence a token at a time.
type Detokenizer interface {
	// Add returns the text that token completes: never part of a
	// UTF-8 character.
	Add(id int32) (string, error)
	// Flush returns what is left once the sequence ended.
	Flush() string
}

// ChatMessage is one message of a chat, as the template receives it:
// with tool calling, an assistant message's calls (arguments decoded from
// their JSON) or a tool message's call ID.
type ChatMessage struct {
	Role, Content    string
	Name, ToolCallID string
	ToolCalls        []ChatToolCall
}

// ChatToolCall is a call of an assistant message; Arguments is decoded
// JSON.
type ChatToolCall struct {
	ID, Name  string
	Arguments any
}

// ChatTool is a function offered to the model; Parameters is its decoded
// JSON Schema.
type ChatTool struct {
	Name, Description string
	Parameters        any
}
