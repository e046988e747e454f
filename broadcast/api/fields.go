package api

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"

	"github.com/tpcoord/tpcoord/internal/fielderr"
	"github.com/tpcoord/tpcoord/internal/suggest"
)

// requestFields are the JSON names of a GenerateRequest's fields.
var requestFields = func() map[string]bool {
	out := map[string]bool{}
	for _, n := range suggest.JSONNames(reflect.TypeFor[GenerateRequest]()) {
		out[n] = true
	}
	return out
}()

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
