package api

import (
	"errors"
	"strings"
	"testing"

	"github.com/tpcoord/tpcoord/internal/fielderr"
)

// TestParseRefusesCaseAndRepeats: encoding/json would take "Max_Tokens"
// as max_tokens and keep the last of two; the request API refuses both,
// naming the field.
func TestParseRefusesCaseAndRepeats(t *testing.T) {
	for body, want := range map[string]string{
		`{"prompt_token_ids":[1],"Max_Tokens":4}`:                 `Max_Tokens: unknown field; did you mean "max_tokens"?`,
		`{"prompt_token_ids":[1],"max_tokens":4,"TEMPERATURE":0}`: `did you mean "temperature"?`,
		`{"prompt_token_ids":[1],"max_tokens":4,"max_tokens":8}`:  "max_tokens: given twice",
	} {
		_, err := ParseGenerateRequest([]byte(body), 10)
		var fe *fielderr.Error
		if err == nil || !errors.As(err, &fe) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want a field error saying %q", body, err, want)
		}
	}
	if _, err := ParseGenerateRequest([]byte(`{"prompt_token_ids":[1],"max_tokens":4,"temperature":0,"seed":3,"group":2}`), 10); err != nil {
		t.Fatal(err)
	}
	if !requestFields["prompt_token_ids"] || !requestFields["logit_bias"] || !requestFields["keepalive"] {
		t.Fatalf("request fields %v miss some", requestFields)
	}
}
