package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/tpcoord/tpcoord/internal/suggest"
)

// The field policy for a request's top-level fields (docs/http-api.md,
// "Fields"). A known field is decoded strictly, its nested fields too. Of
// the others:
//   - harmlessFields do not change the output: accepted and ignored;
//   - unsupportedFields would change it, and this server cannot: refused
//     by name, so that no one gets plain text while asking for a tool call;
//   - one that resembles a known field (the same but for case, or within a
//     small edit distance) is a typo: refused, naming the field it
//     resembles, so that "Max_Tokens" does not run at the default;
//   - any other is ignored, as vLLM ignores it, and named in the answer's
//     Warning header and in the log.
//
// A field given twice is refused: which one counts would be a guess.

// harmlessFields are OpenAI's request fields that do not change what is
// generated.
var harmlessFields = map[string]bool{
	"store": true, "metadata": true, "service_tier": true, "parallel_tool_calls": true,
	"prompt_cache_key": true, "safety_identifier": true, "request_id": true, "priority": true,
}

// unsupportedFields change what is generated, and this server does not
// do them (yet).
var unsupportedFields = map[string]string{
	"tools": "tool calling", "tool_choice": "tool calling", "functions": "function calling", "function_call": "function calling",
	"audio": "audio output", "modalities": "other modalities", "prediction": "predicted outputs",
	"reasoning_effort": "reasoning models", "web_search_options": "web search", "lora_request": "LoRA adapters",
	"use_beam_search": "beam search", "length_penalty": "beam search", "best_of": "best_of",
	"allowed_token_ids": "allowed_token_ids", "bad_words": "bad_words", "prompt_logprobs": "prompt logprobs",
	"truncate_prompt_tokens": "prompt truncation", "include_stop_str_in_output": "stop strings kept in the output",
	"skip_special_tokens": "special tokens in the output", "spaces_between_special_tokens": "special tokens in the output",
	"echo": "echo on chat", "return_token_strs": "token strings", "continue_final_message": "continuing the final message",
	"chat_template": "a chat template per request", "chat_template_kwargs": "chat template arguments",
}

// topLevel checks the top-level fields of the JSON object body against
// the request type of v: it returns the object with the ignored fields
// left out, and their names, or the refusal of a field.
func topLevel(body []byte, v any) (kept []byte, ignored []string, e *apiError) {
	known := suggest.JSONNames(reflect.TypeOf(v).Elem())
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return body, nil, nil // not an object: the strict decoder says why
	}
	var out bytes.Buffer
	out.WriteByte('{')
	seen, dropped := map[string]bool{}, false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return body, nil, nil
		}
		key, _ := tok.(string)
		var val json.RawMessage
		if err := dec.Decode(&val); err != nil {
			return body, nil, nil
		}
		if seen[key] {
			return nil, nil, badRequest(key, "given twice; give each field once")
		}
		seen[key] = true
		use, e := classify(key, known)
		switch {
		case e != nil:
			return nil, nil, e
		case use == fieldHarmless:
			dropped = true
			continue
		case use == fieldIgnored:
			ignored = append(ignored, key)
			continue
		}
		if out.Len() > 1 {
			out.WriteByte(',')
		}
		k, _ := json.Marshal(key)
		out.Write(k)
		out.WriteByte(':')
		out.Write(val)
	}
	out.WriteByte('}')
	if !dropped && len(ignored) == 0 {
		return body, nil, nil // unchanged: the strict decoder also checks what follows the object
	}
	return out.Bytes(), ignored, nil
}

// fieldUse is what becomes of a top-level field.
type fieldUse int

const (
	fieldKnown    fieldUse = iota // decoded
	fieldHarmless                 // left out, silently
	fieldIgnored                  // left out, and named in a warning
)

// classify says what becomes of field key, or refuses it.
func classify(key string, known []string) (fieldUse, *apiError) {
	if slices.Contains(known, key) {
		return fieldKnown, nil
	}
	if harmlessFields[key] {
		return fieldHarmless, nil
	}
	if what, ok := unsupportedFields[key]; ok {
		return 0, badRequest(key, "not supported: this server does not do %s", what)
	}
	if like := suggest.Closest(key, known); like != "" {
		return 0, badRequest(key, "unknown field; did you mean %q?", like)
	}
	return fieldIgnored, nil
}

// warnIgnored is the Warning header naming the fields a request's answer
// ignored.
func warnIgnored(ignored []string) string {
	return fmt.Sprintf("299 tpcoord %q", "ignored fields this server does not use: "+strings.Join(ignored, ", "))
}
