package api

import (
	"strings"
	"testing"
)

// FuzzParseGenerateRequest: whatever the bytes, parsing neither panics nor
// accepts a request that breaks its bounds: a non-empty prompt of at most
// MaxPromptTokens tokens inside the vocabulary, 0 < max_tokens, prompt and
// output within MaxSequenceTokens, valid sampling parameters.
func FuzzParseGenerateRequest(f *testing.F) {
	const vocab = 1000
	for _, s := range []string{
		`{"prompt_token_ids":[1,2,3],"max_tokens":16}`,
		`{"prompt_token_ids":[1],"max_tokens":9223372036854775807,"ignore_eos":true}`,
		`{"prompt_token_ids":[1],"max_tokens":-9223372036854775808}`,
		`{"prompt_token_ids":[999],"max_tokens":1048575}`,
		`{"prompt_token_ids":[5],"max_tokens":3,"temprature":0.5}`,
		`{"prompt_token_ids":[5],"max_tokens":3,"temperature":0.7,"top_k":40,"top_p":0.9,"seed":7,"logprobs":2}`,
		`{"prompt_token_ids":[5],"max_tokens":3} {"x":1}`,
		`{"prompt_token_ids":[1000],"max_tokens":3}`,
		`{"prompt_token_ids":[],"max_tokens":3}`,
		`[]`, `null`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := ParseGenerateRequest(data, vocab)
		if err != nil {
			if r != nil {
				t.Fatalf("a request and an error: %+v, %v", r, err)
			}
			if msg := err.Error(); !strings.HasPrefix(msg, "request: ") && !strings.Contains(msg, ":") {
				t.Fatalf("error %q names no field", msg)
			}
			return
		}
		n := len(r.PromptTokenIDs)
		switch {
		case n == 0 || n > MaxPromptTokens:
			t.Fatalf("accepted a prompt of %d tokens", n)
		case r.MaxTokens <= 0 || r.MaxTokens > MaxSequenceTokens || n+r.MaxTokens > MaxSequenceTokens:
			t.Fatalf("accepted max_tokens %d with a %d-token prompt", r.MaxTokens, n)
		}
		for _, tok := range r.PromptTokenIDs {
			if tok < 0 || tok >= vocab {
				t.Fatalf("accepted token %d outside the vocabulary", tok)
			}
		}
		if err := r.Params.Validate(vocab); err != nil {
			t.Fatalf("accepted invalid parameters: %v", err)
		}
	})
}

// TestParseGenerateRequestRefusals: the holes outside testing found stay
// closed: a max_tokens near 2^63 is refused (the bound's sum once wrapped
// around), and so are unknown fields, naming them.
func TestParseGenerateRequestRefusals(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{`{"prompt_token_ids":[1,2],"max_tokens":9223372036854775807,"ignore_eos":true}`, "max_tokens: 9223372036854775807"},
		{`{"prompt_token_ids":[1,2],"max_tokens":1048575}`, "max_tokens: 1048575, but the prompt (2 tokens)"},
		{`{"prompt_token_ids":[1],"max_tokens":3,"temprature":0.5}`, `temprature: unknown field`},
		{`{"prompt_token_ids":[1],"max_tokens":3}{}`, "more data after the request"},
	} {
		_, err := ParseGenerateRequest([]byte(tc.body), 100)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", tc.body, err, tc.want)
		}
	}
	if _, err := ParseGenerateRequest([]byte(`{"prompt_token_ids":[1,2],"max_tokens":1048574}`), 100); err != nil {
		t.Errorf("a request at the bound: %v", err)
	}
}
