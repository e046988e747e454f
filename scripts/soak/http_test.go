package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/coordinator/gateway"
)

func TestCompletionBody(t *testing.T) {
	lp := 5
	req := api.GenerateRequest{PromptTokenIDs: []int32{3, 4}, MaxTokens: 16}
	req.Params = api.Params{TopK: 50, TopP: 0.9, MinP: 0.05, RepetitionPenalty: 1.1, PresencePenalty: 0.5,
		FrequencyPenalty: 0.3, MinTokens: 4, IgnoreEOS: true, Logprobs: &lp} // greedy: temperature 0
	b, err := json.Marshal(newCompletionBody(&req))
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"prompt": []any{3.0, 4.0}, "max_tokens": 16.0, "temperature": 0.0, "top_k": 50.0, "top_p": 0.9, "min_p": 0.05,
		"repetition_penalty": 1.1, "presence_penalty": 0.5, "frequency_penalty": 0.3, "min_tokens": 4.0, "ignore_eos": true,
		"logprobs": 5.0, "stream": true, "stream_options": map[string]any{"include_usage": true}}
	for k, v := range want {
		if f, ok := v.(float64); ok {
			v = float64(float32(f)) // the float32 fields' values
		}
		if g, ok := got[k].(float64); ok {
			got[k] = float64(float32(g))
		}
		if !reflect.DeepEqual(got[k], v) {
			t.Errorf("%s: %v, want %v", k, got[k], v)
		}
	}
	if _, ok := got["seed"]; ok || len(got) != len(want) {
		t.Errorf("an unseeded request's body has fields %v: the gateway must seed it", got)
	}
	s := uint64(1<<63 - 1)
	req.Seed = &s
	if b, _ := json.Marshal(newCompletionBody(&req)); !strings.Contains(string(b), `"seed":9223372036854775807`) {
		t.Errorf("a seeded request's body: %s", b)
	}
}

// sse is a stream as the gateway writes it.
func sse(events ...string) string {
	var b strings.Builder
	for _, e := range events {
		fmt.Fprintf(&b, "data: %s\n\n", e)
	}
	return b.String()
}

func TestSSEStream(t *testing.T) {
	chunk := func(ids string, lps string, finish string) string {
		return `{"id":"x","object":"text_completion","choices":[{"index":0,"text":"","token_ids":` + ids + `,"logprobs":` + lps + `,"finish_reason":` + finish + `}]}`
	}
	lp := func(v string, top string) string {
		return `{"tokens":["t"],"token_logprobs":[` + v + `],"top_logprobs":[` + top + `],"text_offset":[0]}`
	}
	body := sse(chunk("[7]", lp("-0.5", `{"token_id:7":-0.5}`), "null"),
		chunk("[8]", lp("0", `{}`), "null"), // its logprobs were lost
		chunk("[9]", lp("-2", `{"token_id:9":-2}`), `"length"`),
		`{"id":"x","object":"text_completion","choices":[],"usage":{"prompt_tokens":2,"completion_tokens":3,"total_tokens":5}}`,
		"[DONE]")
	t0 := time.Unix(50, 0)
	clock := []time.Time{t0.Add(10 * time.Millisecond), t0.Add(25 * time.Millisecond), t0.Add(1025 * time.Millisecond)}
	st := &sseStream{logprobs: 1, usage: -1, sent: t0, now: func() time.Time { n := clock[0]; clock = clock[1:]; return n }}
	if err := st.read(strings.NewReader(body)); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(st.tokens, []int32{7, 8, 9}) || !reflect.DeepEqual(st.atMs, []float64{10, 25, 1025}) || st.finish != "length" || !st.done {
		t.Fatalf("tokens %v at %v, finish %q, done %v", st.tokens, st.atMs, st.finish, st.done)
	}
	if err := st.failure(); err != nil || st.check() != (streamCheck{Streamed: 3}) {
		t.Errorf("a whole stream: %v, %+v", err, st.check())
	}
	lps, missing := st.tokenLogprobs()
	if missing != 1 || lps[1] != nil || *lps[0] != -0.5 || *lps[2] != -2 {
		t.Errorf("logprobs %v, %d missing; want token 1's missing", lps, missing)
	}
	st.usage = 4
	if c := st.check(); c.Missing != 1 {
		t.Errorf("3 tokens streamed of 4: %+v", c)
	}
	st.usage = 2
	if c := st.check(); c.Duplicates != 1 {
		t.Errorf("3 tokens streamed of 2: %+v", c)
	}
}

func TestSSEStreamFailures(t *testing.T) {
	noClock := func() time.Time { return time.Unix(0, 0) }
	tok := `{"choices":[{"token_ids":[5],"finish_reason":null}]}`
	for _, tc := range []struct {
		name, body, readErr, failure string
	}{
		{"error event", sse(tok, `{"error":{"message":"rank 0 of job \"soak\" is gone","type":"service_unavailable","param":null,"code":"job_unavailable"}}`,
			`{"choices":[],"usage":{"completion_tokens":1}}`, "[DONE]"), "", `error event: job_unavailable: rank 0 of job "soak" is gone`},
		{"no [DONE]", sse(tok), "stream ended after 1 tokens without [DONE]", ""},
		{"no finish", sse(tok, `{"choices":[],"usage":{"completion_tokens":1}}`, "[DONE]"), "", "no finish_reason before [DONE]"},
		{"no usage", sse(`{"choices":[{"token_ids":[5],"finish_reason":"stop"}]}`, "[DONE]"), "", "no usage chunk before [DONE]"},
	} {
		st := &sseStream{logprobs: -1, usage: -1, now: noClock}
		err := st.read(strings.NewReader(tc.body))
		if fmt.Sprint(err) != fmt.Sprint(errOrNil(tc.readErr)) {
			t.Errorf("%s: read: %v, want %q", tc.name, err, tc.readErr)
		}
		if err == nil && fmt.Sprint(st.failure()) != tc.failure {
			t.Errorf("%s: failure %v, want %q", tc.name, st.failure(), tc.failure)
		}
	}
}

func errOrNil(s string) error {
	if s == "" {
		return nil
	}
	return fmt.Errorf("%s", s)
}

// A request through a gateway: the seed header, the tokens, and an
// answer refused before the stream began.
func TestGatewayClientGenerate(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body completionBody
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || r.URL.Path != "/v1/completions" {
			t.Errorf("%s: %v", r.URL.Path, err)
		}
		w.Header().Set(gateway.SeedHeader, "12345")
		if body.MaxTokens == 1 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"error":{"message":"rank 0: unavailable: rank 0 is waiting for the world to re-form","type":"service_unavailable","param":null,"code":"reforming"}}`))
			return
		}
		_, _ = w.Write([]byte(sse(`{"choices":[{"token_ids":[1,2],"finish_reason":null}]}`, `{"choices":[{"token_ids":[3],"finish_reason":"stop"}]}`,
			`{"choices":[],"usage":{"completion_tokens":3}}`, "[DONE]")))
	}))
	defer srv.Close()
	gc := newGatewayClient(srv.URL)
	defer gc.close()
	rec := gc.generate(context.Background(), 4, api.GenerateRequest{PromptTokenIDs: []int32{1}, MaxTokens: 8}, time.Minute)
	if !rec.ok() || rec.Path != pathGateway || *rec.GatewaySeed != 12345 || !reflect.DeepEqual(rec.Tokens, []int32{1, 2, 3}) || len(rec.TokenMs) != 3 {
		t.Errorf("a stream: %+v", rec)
	}
	rec = gc.generate(context.Background(), 6, api.GenerateRequest{PromptTokenIDs: []int32{1}, MaxTokens: 1}, time.Minute)
	if rec.ok() || rec.Error != "HTTP 503 reforming: rank 0: unavailable: rank 0 is waiting for the world to re-form" || *rec.GatewaySeed != 12345 {
		t.Errorf("a refusal: %+v", rec)
	}
	if c := classify(rec.Error, false); c != "unavailable: rank 0 is waiting for the world to re-form" {
		t.Errorf("the refusal's cause: %q", c)
	}
}
