package gateway

import (
	"strings"
	"testing"

	"github.com/tpcoord/tpcoord/internal/suggest"
)

// TestFieldPolicy: fields that do not change the output are taken
// silently, unknown ones are taken with a Warning that names them; a
// typo of a known field, a field this server cannot honour, and a field
// given twice are refused, naming it.
func TestFieldPolicy(t *testing.T) {
	g, _ := newTestGateway(t, "abc", nil, WithTokenizer(byteTokenizer{}))
	srv := serve(t, g)
	for _, c := range []struct {
		body    string
		status  int
		param   string // of a refusal
		words   string // in the refusal's message, or in the Warning header
		warning bool
	}{
		{`{"prompt":"hi","max_tokens":3,"store":true,"metadata":{"a":"b"},"service_tier":"auto","user":"u","parallel_tool_calls":false}`, 200, "", "", false},
		{`{"prompt":"hi","max_tokens":3,"x_trace_tag":"t1","guidance_scale":0.1}`, 200, "", "x_trace_tag, guidance_scale", true},
		{`{"prompt":"hi","max_tokens":3,"stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true}}`, 200, "", "", false},
		{`{"prompt":"hi","Max_Tokens":3}`, 400, "Max_Tokens", `did you mean "max_tokens"`, false},
		{`{"prompt":"hi","max_token":3}`, 400, "max_token", `did you mean "max_tokens"`, false},
		{`{"prompt":"hi","temprature":1}`, 400, "temprature", `did you mean "temperature"`, false},
		{`{"prompt":"hi","tools":[]}`, 400, "tools", "not supported: this server does not do tool calling", false},
		{`{"prompt":"hi","logit_bias":{"1":1},"guided_decoding_backend":"xgrammar","guided_choice":["a","b"]}`, 200, "", "", false},
		{`{"prompt":"hi","max_tokens":2,"max_tokens":3}`, 400, "max_tokens", "given twice", false},
	} {
		resp := post(t, srv, "/v1/completions", c.body)
		warning := resp.Header.Get("Warning")
		if resp.StatusCode != c.status {
			t.Errorf("%s: status %d, want %d", c.body, resp.StatusCode, c.status)
			continue
		}
		if c.status != 200 {
			e := decode[errorBody](t, resp)
			if e.Error.Param == nil || *e.Error.Param != c.param || !strings.Contains(e.Error.Message, c.words) {
				t.Errorf("%s: %+v, want %s named, saying %q", c.body, e.Error, c.param, c.words)
			}
			continue
		}
		resp.Body.Close()
		if (warning != "") != c.warning || !strings.Contains(warning, c.words) {
			t.Errorf("%s: Warning %q, want one: %v, naming %q", c.body, warning, c.warning, c.words)
		}
	}
}

func TestResembles(t *testing.T) {
	known := []string{"n", "max_tokens", "temperature", "seed", "stop", "top_p", "top_k"}
	for key, want := range map[string]string{
		"Max_Tokens": "max_tokens", "maxtokens": "max_tokens", "max_tokns": "max_tokens", "N": "n",
		"seeds": "seed", "top_q": "top_p", "id": "", "x": "", "prompt_cache": "", "temperatures": "temperature",
	} {
		if got := suggest.Closest(key, known); got != want {
			t.Errorf("suggest.Closest(%q) = %q, want %q", key, got, want)
		}
	}
}
