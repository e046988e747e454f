package gateway

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tpcoord/tpcoord/internal/buildinfo"
)

// bosTokenizer is byteTokenizer adding its special token 256 in front of
// a sequence when asked to add special tokens.
type bosTokenizer struct{ byteTokenizer }

func (t bosTokenizer) Encode(text string, addSpecial bool) ([]int32, error) {
	ids, _ := t.byteTokenizer.Encode(text, false)
	if addSpecial {
		ids = append([]int32{256}, ids...)
	}
	return ids, nil
}

func (t bosTokenizer) EncodeChat(msgs []ChatMessage, _ []ChatTool, gen, addSpecial bool) ([]int32, error) {
	s, _ := t.ApplyChatTemplate(msgs, gen)
	return t.Encode(s, addSpecial)
}

func byteIDs(s string) []int32 {
	out, _ := byteTokenizer{}.Encode(s, false)
	return out
}

// TestTokenize: vLLM's /tokenize shapes, for a prompt (special tokens
// added by default) and a chat (rendered by the template, none added by
// default), and the job's max_model_len.
func TestTokenize(t *testing.T) {
	g, _ := newTestGateway(t, "", func(c *Config) { c.MaxModelLen = 100 }, WithTokenizer(bosTokenizer{byteTokenizer{template: true}}))
	srv := serve(t, g)
	chat := `"messages":[{"role":"user","content":"hi"}]`
	for _, c := range []struct {
		body string
		want []int32
	}{
		{`{"prompt":"hi"}`, append([]int32{256}, byteIDs("hi")...)},
		{`{"model":"m","prompt":"hi","add_special_tokens":false}`, byteIDs("hi")},
		{`{"prompt":""}`, []int32{256}},
		{`{` + chat + `}`, byteIDs("<user>hi\n<assistant>")},
		{`{` + chat + `,"add_generation_prompt":false}`, byteIDs("<user>hi\n")},
		{`{` + chat + `,"add_special_tokens":true}`, append([]int32{256}, byteIDs("<user>hi\n<assistant>")...)},
	} {
		resp := post(t, srv, "/tokenize", c.body)
		r := decode[tokenizeResponse](t, resp)
		if resp.StatusCode != 200 || r.Count != len(c.want) || !equal(r.Tokens, c.want) || r.MaxModelLen != 100 {
			t.Errorf("%s: status %d %+v, want tokens %v and max_model_len 100", c.body, resp.StatusCode, r, c.want)
		}
	}
}

// TestTokenizeMaxModelLenFromRank0: a gateway not told the job's bound
// reports rank 0's (the model's context, as its worker reported it).
func TestTokenizeMaxModelLenFromRank0(t *testing.T) {
	g, f := newTestGateway(t, "", nil, WithTokenizer(byteTokenizer{}))
	f.maxModelLen = 4096
	resp := post(t, serve(t, g), "/tokenize", `{"prompt":"hi"}`)
	if r := decode[tokenizeResponse](t, resp); resp.StatusCode != 200 || r.MaxModelLen != 4096 {
		t.Fatalf("status %d %+v, want max_model_len 4096 from rank 0", resp.StatusCode, r)
	}
}

func TestDetokenize(t *testing.T) {
	g, _ := newTestGateway(t, "", nil, WithTokenizer(byteTokenizer{}))
	srv := serve(t, g)
	resp := post(t, srv, "/detokenize", `{"model":"m","tokens":[104,105,256]}`)
	if r := decode[detokenizeResponse](t, resp); resp.StatusCode != 200 || r.Prompt != "hi" {
		t.Fatalf("status %d %+v, want prompt hi", resp.StatusCode, r)
	}
	resp = post(t, srv, "/detokenize", `{"tokens":[]}`)
	if r := decode[detokenizeResponse](t, resp); resp.StatusCode != 200 || r.Prompt != "" {
		t.Fatalf("no tokens: status %d %+v, want an empty prompt", resp.StatusCode, r)
	}
}

// TestTokenizeRefusals: every refusal is OpenAI's error object, naming the
// field at fault.
func TestTokenizeRefusals(t *testing.T) {
	g, _ := newTestGateway(t, "", nil, WithTokenizer(byteTokenizer{}))
	srv := serve(t, g)
	for _, c := range []struct {
		path, body   string
		status       int
		param, words string
	}{
		{"/tokenize", `{}`, 400, "prompt", "required"},
		{"/tokenize", `{"prompt":"a","messages":[]}`, 400, "messages", "not both"},
		{"/tokenize", `{"prompt":"a","add_generation_prompt":true}`, 400, "add_generation_prompt", "only with messages"},
		{"/tokenize", `{"prompt":"a","return_token_strs":true}`, 400, "return_token_strs", "not supported"},
		{"/tokenize", `{"model":"other","prompt":"a"}`, 404, "model", "does not exist"},
		{"/tokenize", `{"messages":[{"role":"user","content":"a"}]}`, 400, "messages", "chat template"},
		{"/tokenize", `{"prompt":"` + strings.Repeat("a", MaxPromptBytes+1) + `"}`, 400, "prompt", "at most"},
		{"/detokenize", `{}`, 400, "tokens", "required"},
		{"/detokenize", `{"tokens":[1,257]}`, 400, "tokens", "token 257 (index 1) is out of the vocabulary [0, 257)"},
		{"/detokenize", `{"tokens":[-1]}`, 400, "tokens", "out of the vocabulary"},
		{"/detokenize", `{"model":"other","tokens":[1]}`, 404, "model", "does not exist"},
	} {
		resp := post(t, srv, c.path, c.body)
		e := decode[errorBody](t, resp)
		if resp.StatusCode != c.status || e.Error.Param == nil || *e.Error.Param != c.param || !strings.Contains(e.Error.Message, c.words) {
			t.Errorf("%s %.60s: status %d %+v, want %d naming %s, saying %q", c.path, c.body, resp.StatusCode, e.Error, c.status, c.param, c.words)
		}
	}
}

// TestTokenizeWithoutTokenizer: a 400 that says no tokenizer is configured.
func TestTokenizeWithoutTokenizer(t *testing.T) {
	g, _ := newTestGateway(t, "", nil)
	srv := serve(t, g)
	for path, body := range map[string]string{"/tokenize": `{"prompt":"a"}`, "/detokenize": `{"tokens":[1]}`} {
		resp := post(t, srv, path, body)
		e := decode[errorBody](t, resp)
		if resp.StatusCode != 400 || e.Error.Code == nil || *e.Error.Code != "no_tokenizer" || !strings.Contains(e.Error.Message, "no tokenizer configured") {
			t.Errorf("%s: status %d %+v, want 400 no_tokenizer", path, resp.StatusCode, e.Error)
		}
	}
}

// TestTokenizeNeedsAPIKey: /tokenize and /detokenize are behind the keys,
// as /v1 is.
func TestTokenizeNeedsAPIKey(t *testing.T) {
	g, _ := newTestGateway(t, "", func(c *Config) { c.APIKeys = []string{"k"} }, WithTokenizer(byteTokenizer{}))
	srv := serve(t, g)
	if resp := post(t, srv, "/tokenize", `{"prompt":"a"}`); resp.StatusCode != 401 {
		t.Errorf("no key: %d, want 401", resp.StatusCode)
	}
	if resp := post(t, srv, "/detokenize", `{"tokens":[97]}`, "Authorization", "Bearer k"); resp.StatusCode != 200 {
		t.Errorf("with the key: %d, want 200", resp.StatusCode)
	}
}

func get(t *testing.T, srv *httptest.Server, url string) *http.Response {
	t.Helper()
	resp, err := srv.Client().Get(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func TestVersion(t *testing.T) {
	for _, c := range []struct {
		opts []Option
		want string
	}{{nil, buildinfo.Get().Version}, {[]Option{WithVersion("1.2.3")}, "1.2.3"}} {
		g, _ := newTestGateway(t, "", nil, c.opts...)
		srv := serve(t, g)
		resp := get(t, srv, srv.URL+"/version")
		if r := decode[map[string]string](t, resp); resp.StatusCode != 200 || len(r) != 1 || r["version"] != c.want {
			t.Errorf("status %d %v, want {version: %s}", resp.StatusCode, r, c.want)
		}
	}
}

// TestUnmatchedIsJSON: an unknown path is a 404 and a wrong method a 405
// with Allow, both OpenAI's error object (param and code null), whatever
// the API keys.
func TestUnmatchedIsJSON(t *testing.T) {
	g, _ := newTestGateway(t, "", func(c *Config) { c.APIKeys = []string{"k"} })
	srv := serve(t, g)
	for _, c := range []struct {
		method, path string
		status       int
		allow, msg   string
	}{
		{"GET", "/nope", 404, "", "Invalid URL (GET /nope)"},
		{"POST", "/v1/embeddings", 404, "", "Invalid URL (POST /v1/embeddings)"},
		{"GET", "/v1/completions", 405, "POST", "Invalid method for URL (GET /v1/completions)"},
		{"DELETE", "/tokenize", 405, "POST", "allowed are POST"},
		{"POST", "/health", 405, "GET, HEAD", "allowed are GET, HEAD"},
	} {
		req, _ := http.NewRequest(c.method, srv.URL+c.path, nil)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var raw map[string]map[string]any
		_ = json.Unmarshal(body, &raw)
		e := raw["error"]
		if resp.StatusCode != c.status || resp.Header.Get("Content-Type") != "application/json" || resp.Header.Get("Allow") != c.allow ||
			e == nil || e["type"] != "invalid_request_error" || e["message"] != nil && !strings.Contains(e["message"].(string), c.msg) ||
			e["param"] != nil || e["code"] != nil || !strings.Contains(string(body), `"param":null`) {
			t.Errorf("%s %s: status %d, Allow %q, %s; want %d, Allow %q, %q", c.method, c.path, resp.StatusCode, resp.Header.Get("Allow"), body, c.status, c.allow, c.msg)
		}
	}
}

// TestHealthAliases: the gateway answers the agents' spellings too.
func TestHealthAliases(t *testing.T) {
	g, _ := newTestGateway(t, "", nil)
	srv := serve(t, g)
	for _, p := range []string{"/health", "/healthz", "/ready", "/readyz"} {
		if resp := get(t, srv, srv.URL+p); resp.StatusCode != 200 {
			t.Errorf("%s: %d, want 200", p, resp.StatusCode)
		}
	}
	resp := get(t, srv, srv.URL+"/readyz")
	if r := decode[map[string]any](t, resp); r["status"] != "ready" {
		t.Errorf("/readyz: %v, want /ready's answer", r)
	}
}
