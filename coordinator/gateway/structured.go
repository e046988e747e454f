package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"

	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/internal/fielderr"
)

// structuredFields are the request fields that ask for structured outputs:
// OpenAI's response_format, vLLM's structured_outputs, and vLLM's older
// guided_* fields. A request uses one of these forms.
type structuredFields struct {
	ResponseFormat    *responseFormat      `json:"response_format"`
	StructuredOutputs *structuredOutputsIn `json:"structured_outputs"`
	GuidedJSON        json.RawMessage      `json:"guided_json"`
	GuidedRegex       *string              `json:"guided_regex"`
	GuidedChoice      []string             `json:"guided_choice"`
	GuidedGrammar     *string              `json:"guided_grammar"`
	// GuidedDecodingBackend names vLLM's grammar engine; this server has
	// one, so any value is taken.
	GuidedDecodingBackend string `json:"guided_decoding_backend"`
	// GuidedWhitespacePattern would let the model write whitespace between
	// JSON tokens; output here is always compact.
	GuidedWhitespacePattern *string `json:"guided_whitespace_pattern"`
}

// responseFormat is OpenAI's response_format.
type responseFormat struct {
	Type       string `json:"type"`
	JSONSchema *struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Schema      json.RawMessage `json:"schema"`
		Strict      *bool           `json:"strict"`
	} `json:"json_schema"`
}

// structuredOutputsIn is vLLM's structured_outputs object.
type structuredOutputsIn struct {
	api.StructuredOutputs
	// DisableAnyWhitespace is vLLM's switch for compact JSON, which is
	// what this server always writes.
	DisableAnyWhitespace *bool           `json:"disable_any_whitespace"`
	WhitespacePattern    *string         `json:"whitespace_pattern"`
	StructuralTag        json.RawMessage `json:"structural_tag"`
}

// structured returns the request's structured outputs (nil for none) and
// the field that holds its source (response_format.json_schema.schema,
// guided_regex, …), for errors; or the refusal of a form given with
// another, or of one this server does not do. Whether the constraint
// compiles is checked after.
func (f *structuredFields) structured() (*api.StructuredOutputs, string, *apiError) {
	var forms []string
	var so *api.StructuredOutputs
	var field string
	take := func(name string, s *api.StructuredOutputs) {
		forms = append(forms, name)
		so, field = s, name
	}
	if e := f.responseFormat(take); e != nil {
		return nil, "", e
	}
	if s := f.StructuredOutputs; s != nil {
		if e := s.check(); e != nil {
			return nil, "", e
		}
		take("structured_outputs", &s.StructuredOutputs)
		kind, _, _ := s.Kind()
		field = "structured_outputs." + kind
	}
	if e := f.guided(take); e != nil {
		return nil, "", e
	}
	switch {
	case len(forms) > 1:
		return nil, "", badRequest(forms[1], "asks for structured outputs, and so does %s: give one", forms[0])
	case so == nil:
		return nil, "", nil
	}
	if err := so.Validate(); err != nil {
		var fe *fielderr.Error
		if errors.As(err, &fe) && !strings.HasPrefix(field, "structured_outputs") {
			return nil, "", badRequest(field, "%v", fe.Err)
		}
		return nil, "", fieldError(err)
	}
	return so, field, nil
}

// responseFormat takes OpenAI's response_format: text (nothing),
// json_object, or json_schema with its schema.
func (f *structuredFields) responseFormat(take func(string, *api.StructuredOutputs)) *apiError {
	rf := f.ResponseFormat
	if rf == nil {
		return nil
	}
	switch rf.Type {
	case "text":
	case "json_object":
		take("response_format", &api.StructuredOutputs{JSONObject: true})
	case "json_schema":
		if rf.JSONSchema == nil || len(bytes.TrimSpace(rf.JSONSchema.Schema)) == 0 {
			return badRequest("response_format.json_schema.schema", "is required with type json_schema")
		}
		take("response_format.json_schema.schema", &api.StructuredOutputs{JSON: rf.JSONSchema.Schema})
	default:
		return badRequest("response_format.type", "%q is not supported: use text, json_object or json_schema", rf.Type)
	}
	return nil
}

// check refuses the structured_outputs options this server does not do.
func (s *structuredOutputsIn) check() *apiError {
	switch {
	case s.DisableAnyWhitespace != nil && !*s.DisableAnyWhitespace:
		return badRequest("structured_outputs.disable_any_whitespace", "false is not supported: JSON is always written compact here")
	case s.WhitespacePattern != nil:
		return badRequest("structured_outputs.whitespace_pattern", "is not supported: JSON is always written compact here")
	case len(s.StructuralTag) > 0:
		return badRequest("structured_outputs.structural_tag", "is not supported")
	}
	return nil
}

// guided takes vLLM's guided_* fields.
func (f *structuredFields) guided(take func(string, *api.StructuredOutputs)) *apiError {
	if f.GuidedWhitespacePattern != nil {
		return badRequest("guided_whitespace_pattern", "is not supported: JSON is always written compact here")
	}
	if len(bytes.TrimSpace(f.GuidedJSON)) > 0 && string(bytes.TrimSpace(f.GuidedJSON)) != "null" {
		take("guided_json", &api.StructuredOutputs{JSON: f.GuidedJSON})
	}
	if f.GuidedRegex != nil {
		take("guided_regex", &api.StructuredOutputs{Regex: *f.GuidedRegex})
	}
	if f.GuidedChoice != nil {
		take("guided_choice", &api.StructuredOutputs{Choice: f.GuidedChoice})
	}
	if f.GuidedGrammar != nil {
		take("guided_grammar", &api.StructuredOutputs{Grammar: *f.GuidedGrammar})
	}
	return nil
}

// compileError is the answer to a constraint that does not compile: a 400
// naming the field its source came from.
func compileError(field string, err error) *apiError {
	return badRequest(field, "%v", err)
}
