package gateway

import (
	"net/http"
	"strings"
	"testing"
)

// bigTokenizer is byteTokenizer with more ids than the fake job's
// vocabulary of 257.
type bigTokenizer struct{ byteTokenizer }

func (bigTokenizer) VocabSize() int { return 300 }

// TestTokenizerLargerThanVocabRefused: a tokenizer with more ids than the
// job's vocabulary makes /ready 503 and every completion and chat request
// 503, with the same reason; a tokenizer that fits serves.
func TestTokenizerLargerThanVocabRefused(t *testing.T) {
	const reason = "the tokenizer bytes has 300 tokens, more than the job's vocabulary of 257"
	g, _ := newTestGateway(t, "hello", nil, WithTokenizer(bigTokenizer{byteTokenizer{template: true}}))
	srv := serve(t, g)
	ready := decode[map[string]string](t, get(t, srv, srv.URL+"/ready"))
	if ready["status"] != "unavailable" || ready["reason"] != reason {
		t.Errorf("/ready: %v, want unavailable with %q", ready, reason)
	}
	for path, body := range map[string]string{
		"/v1/completions":      `{"model":"m","prompt":"hi","max_tokens":3}`,
		"/v1/completions#ids":  `{"model":"m","prompt":[104,105],"max_tokens":3}`,
		"/v1/chat/completions": `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":3}`,
	} {
		resp := post(t, srv, strings.Split(path, "#")[0], body)
		e := decode[errorBody](t, resp)
		if resp.StatusCode != http.StatusServiceUnavailable || e.Error.Code == nil || *e.Error.Code != "tokenizer_mismatch" ||
			!strings.Contains(e.Error.Message, reason) || resp.Header.Get("Retry-After") != "" {
			t.Errorf("%s: %d %+v (Retry-After %q); want 503 tokenizer_mismatch with %q and no Retry-After", path, resp.StatusCode, e.Error, resp.Header.Get("Retry-After"), reason)
		}
	}

	// The same job with a tokenizer that fits: ready, and served.
	g, _ = newTestGateway(t, "hello", nil, WithTokenizer(byteTokenizer{template: true}))
	srv = serve(t, g)
	if resp := post(t, srv, "/v1/completions", `{"model":"m","prompt":"hi","max_tokens":3}`); resp.StatusCode != http.StatusOK {
		t.Errorf("a tokenizer that fits: %d", resp.StatusCode)
	}
	if ready := decode[map[string]any](t, get(t, srv, srv.URL+"/ready")); ready["status"] != "ready" {
		t.Errorf("/ready with a tokenizer that fits: %v", ready)
	}
}

func TestCheckVocab(t *testing.T) {
	tok := bigTokenizer{}
	for vocab, fits := range map[int]bool{0: true, 299: false, 300: true, 301: true} {
		if err := CheckVocab(tok, vocab); (err == nil) != fits {
			t.Errorf("vocab %d: %v, want fits %v", vocab, err, fits)
		}
	}
	if CheckVocab(nil, 10) != nil {
		t.Error("no tokenizer: want nil")
	}
}
