package api

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"

	"github.com/tpcoord/tpcoord/internal/fielderr"
)

// requestFields are the JSON names of a GenerateRequest's fields.
var requestFields = jsonFields(reflect.TypeFor[GenerateRequest]())

// exactFields refuses what encoding/json would take quietly: a field
// named in another case than its own ("Max_Tokens" decodes into
// max_tokens), and a field given twice (the last one would count). Data
// that is not an object is left to the decoder.
func exactFields(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil
		}
		key, _ := tok.(string)
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return nil
		}
		if seen[key] {
			return fielderr.New(key, "given twice; give each field once")
		}
		seen[key] = true
		if requestFields[key] {
			continue
		}
		for f := range requestFields {
			if strings.EqualFold(f, key) {
				return fielderr.New(key, "unknown field; did you mean %q?", f)
			}
		}
	}
	return nil
}

// jsonFields returns the JSON names of struct type t's fields, those of
// embedded structs included.
func jsonFields(t reflect.Type) map[string]bool {
	out := map[string]bool{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case f.Anonymous && f.Type.Kind() == reflect.Struct && name == "":
			for k := range jsonFields(f.Type) {
				out[k] = true
			}
		case name != "" && name != "-":
			out[name] = true
		}
	}
	return out
}
