package api

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"

	"github.com/tpcoord/tpcoord/internal/fielderr"
)

// StructuredOutputs constrains a request's output to a language, as vLLM's
// structured_outputs: exactly one field is set. Rank 0 samples only tokens
// that keep the output a prefix of a sentence of the language, and EOS only
// where a sentence is complete.
type StructuredOutputs struct {
	// JSON is a JSON Schema: an object (or a JSON string holding one, as
	// vLLM also takes).
	JSON json.RawMessage `json:"json,omitempty"`
	// Regex is a regular expression in RE2 syntax, matched whole.
	Regex string `json:"regex,omitempty"`
	// Choice lists the outputs allowed: the output is exactly one of them.
	Choice []string `json:"choice,omitempty"`
	// Grammar is a GBNF grammar (llama.cpp's form; the start rule is root).
	Grammar string `json:"grammar,omitempty"`
	// JSONObject asks for any JSON object.
	JSONObject bool `json:"json_object,omitempty"`
}

// Kinds of structured output, as Kind returns them.
const (
	StructuredJSON       = "json"
	StructuredRegex      = "regex"
	StructuredChoice     = "choice"
	StructuredGrammar    = "grammar"
	StructuredJSONObject = "json_object"
)

// MaxStructuredBytes bounds the source of a constraint (a schema, a regular
// expression, a grammar, or the choices together).
const MaxStructuredBytes = 64 << 10

// MaxChoices bounds the entries of choice.
const MaxChoices = 1024

// Kind returns the kind of constraint and its source: the schema's JSON
// text (a JSON string unwrapped), the regular expression or the grammar;
// choices for choice.
func (s *StructuredOutputs) Kind() (kind, source string, choices []string) {
	switch {
	case len(s.JSON) > 0:
		return StructuredJSON, string(s.schema()), nil
	case s.Regex != "":
		return StructuredRegex, s.Regex, nil
	case s.Choice != nil:
		return StructuredChoice, "", s.Choice
	case s.Grammar != "":
		return StructuredGrammar, s.Grammar, nil
	}
	return StructuredJSONObject, "", nil
}

// schema is the schema's JSON text: JSON itself, or the text of a JSON
// string.
func (s *StructuredOutputs) schema() []byte {
	var text string
	if bytes.HasPrefix(bytes.TrimSpace(s.JSON), []byte(`"`)) && json.Unmarshal(s.JSON, &text) == nil {
		return []byte(text)
	}
	return s.JSON
}

// Key identifies the constraint: equal keys, equal languages. It is a
// SHA-256 over the kind and the source, each length-prefixed.
func (s *StructuredOutputs) Key() string {
	kind, src, choices := s.Kind()
	h := sha256.New()
	put := func(b string) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write([]byte(b))
	}
	put(kind)
	put(src)
	for _, c := range choices {
		put(c)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Validate checks that exactly one field is set and the source is within
// its bounds. Whether the source compiles is the grammar's business.
// Errors name structured_outputs.<field>.
func (s *StructuredOutputs) Validate() error {
	set := 0
	for _, on := range []bool{len(s.JSON) > 0, s.Regex != "", s.Choice != nil, s.Grammar != "", s.JSONObject} {
		if on {
			set++
		}
	}
	if set != 1 {
		return fielderr.New("structured_outputs", "set exactly one of json, regex, choice, grammar and json_object (%d set)", set)
	}
	kind, src, choices := s.Kind()
	size := len(src)
	if kind == StructuredChoice {
		if len(choices) == 0 || len(choices) > MaxChoices {
			return fielderr.New("structured_outputs.choice", "has %d entries, want 1 to %d", len(choices), MaxChoices)
		}
		for _, c := range choices {
			size += len(c)
		}
	}
	if size > MaxStructuredBytes {
		return fielderr.New("structured_outputs."+kind, "is %d bytes, at most %d", size, MaxStructuredBytes)
	}
	return nil
}
