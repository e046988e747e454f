package gateway

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/internal/poll"
)

func post(t *testing.T, srv *httptest.Server, path, body string, hdr ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func decode[T any](t *testing.T, resp *http.Response) T {
	t.Helper()
	var v T
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatalf("decode: %v", err)
	}
	return v
}

// events reads a server-sent event stream up to [DONE].
func events(t *testing.T, resp *http.Response) []string {
	t.Helper()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q, want text/event-stream", ct)
	}
	var out []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			return out
		}
		out = append(out, data)
	}
	t.Fatalf("stream ended without [DONE] after %d events", len(out))
	return nil
}

func serve(t *testing.T, g *Gateway) *httptest.Server {
	srv := httptest.NewServer(g.Handler())
	t.Cleanup(srv.Close)
	return srv
}

func TestCompletionTextStopsAtStopString(t *testing.T) {
	g, f := newTestGateway(t, "Hello world, again", nil, WithTokenizer(byteTokenizer{}))
	srv := serve(t, g)
	resp := post(t, srv, "/v1/completions", `{"model":"m","prompt":"hi","max_tokens":30,"stop":["wor","zz"]}`)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	r := decode[completionResponse](t, resp)
	c := r.Choices[0]
	if c.Text != "Hello " || *c.FinishReason != "stop" {
		t.Fatalf("text %q finish %q, want %q stop", c.Text, *c.FinishReason, "Hello ")
	}
	if got := f.requests()[0].PromptTokenIDs; string(bytesOf(got)) != "hi" {
		t.Fatalf("prompt sent %v", got)
	}
	if f.cancels() != 1 {
		t.Fatalf("rank 0 got %d cancels, want 1 (the stop string frees the row)", f.cancels())
	}
	if r.Usage.PromptTokens != 2 || r.Usage.CompletionTokens != len(c.TokenIDs) {
		t.Fatalf("usage %+v with %d tokens", r.Usage, len(c.TokenIDs))
	}
}

func bytesOf(ids []int32) []byte {
	b := make([]byte, len(ids))
	for i, id := range ids {
		b[i] = byte(id)
	}
	return b
}

// A stream never sends part of a UTF-8 character, nor the start of a stop
// string that then matches.
func TestStreamNeverSplitsCharactersOrStops(t *testing.T) {
	text := "héllo €uro 日本STOP after"
	g, _ := newTestGateway(t, text, nil, WithTokenizer(byteTokenizer{}))
	srv := serve(t, g)
	resp := post(t, srv, "/v1/completions", `{"prompt":[1],"max_tokens":100,"stream":true,"stop":"STOP"}`)
	var all strings.Builder
	var finish string
	for _, e := range events(t, resp) {
		var ch completionResponse
		if err := json.Unmarshal([]byte(e), &ch); err != nil {
			t.Fatal(err)
		}
		c := ch.Choices[0]
		if !utf8.ValidString(c.Text) {
			t.Fatalf("chunk %q is not valid UTF-8", c.Text)
		}
		all.WriteString(c.Text)
		if c.FinishReason != nil {
			finish = *c.FinishReason
		}
	}
	if want := "héllo €uro 日本"; all.String() != want || finish != "stop" {
		t.Fatalf("streamed %q (finish %q), want %q (stop)", all.String(), finish, want)
	}
}

func TestStreamUsageAndTokenIDs(t *testing.T) {
	g, _ := newTestGateway(t, "abcdef", nil)
	srv := serve(t, g)
	resp := post(t, srv, "/v1/completions", `{"prompt":[[1,2],[3]],"n":2,"max_tokens":4,"seed":5,"stream":true,"stream_options":{"include_usage":true}}`)
	tokens := map[int][]int32{}
	var u *usage
	for _, e := range events(t, resp) {
		var ch completionResponse
		if err := json.Unmarshal([]byte(e), &ch); err != nil {
			t.Fatal(err)
		}
		for _, c := range ch.Choices {
			tokens[c.Index] = append(tokens[c.Index], c.TokenIDs...)
		}
		if ch.Usage != nil {
			u = ch.Usage
		}
	}
	if len(tokens) != 4 {
		t.Fatalf("choices %v, want 4 (2 prompts × n 2)", tokens)
	}
	for i, ts := range tokens {
		if string(bytesOf(ts)) != "abcd" {
			t.Fatalf("choice %d streamed %v", i, ts)
		}
	}
	if u == nil || u.PromptTokens != 3 || u.CompletionTokens != 16 {
		t.Fatalf("usage %+v, want prompt 3 completion 16", u)
	}
}

func TestSeedsPerChoice(t *testing.T) {
	seed := int64(7)
	f := samplingFields{Seed: &seed}
	n := 3
	f.N = &n
	pl := &plan{}
	if e := f.sampling(pl, 16, false); e != nil {
		t.Fatal(e)
	}
	pl.prompts = [][]int32{{1}, {2}}
	var seeds []uint64
	for _, r := range pl.requests() {
		seeds = append(seeds, *r.Seed)
	}
	// Counted across prompts (the choices' index): the same prompt twice
	// gets two different answers.
	if want := []uint64{7, 8, 9, 10, 11, 12}; !equal(seeds, want) {
		t.Fatalf("seeds %v, want %v", seeds, want)
	}
	// Unseeded, the request gets a seed drawn for it, in [0, 2^63), used
	// as a client's: every choice has a seed of its own, so that it can be
	// continued after a fault with the tokens it would have had.
	f.Seed = nil
	pl = &plan{}
	if e := f.sampling(pl, 16, false); e != nil {
		t.Fatal(e)
	}
	pl.prompts = [][]int32{{1}, {2}}
	s := pl.seed
	if s >= 1<<63 {
		t.Fatalf("drawn seed %d is no valid seed field (>= 2^63)", s)
	}
	seeds = seeds[:0]
	for _, r := range pl.requests() {
		seeds = append(seeds, *r.Seed)
	}
	if want := []uint64{s, s + 1, s + 2, s + 3, s + 4, s + 5}; !equal(seeds, want) {
		t.Fatalf("unseeded: seeds %v, want %v", seeds, want)
	}
}

func equal[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestInvalidRequestsNameTheField(t *testing.T) {
	g, _ := newTestGateway(t, "x", nil)
	srv := serve(t, g)
	for _, c := range []struct{ body, param string }{
		{`{"prompt":[1],"temprature":1}`, "temprature"},
		{`{"prompt":[1],"temperature":-1}`, "temperature"},
		{`{"prompt":[1],"top_p":2}`, "top_p"},
		{`{"prompt":[1],"max_tokens":0}`, "max_tokens"},
		{`{"prompt":[1],"max_tokens":"many"}`, "max_tokens"},
		{`{"prompt":[]}`, "prompt"},
		{`{"prompt":"text"}`, "prompt"}, // no tokenizer
		{`{"prompt":[1],"stop":"x"}`, "stop"},
		{`{"prompt":[1],"n":1000}`, "n"},
		{`{"prompt":[1],"logit_bias":{"a":1}}`, "logit_bias"},
		{`{"prompt":[1],"echo":true}`, "echo"},
		{`{"prompt":[1],"seed":-1}`, "seed"},
		{`{"prompt":[1],"stream_options":{"include_usage":true}}`, "stream_options"},
		{`{"prompt":[1],"logprobs":21}`, "logprobs"},
	} {
		resp := post(t, srv, "/v1/completions", c.body)
		e := decode[errorBody](t, resp)
		if resp.StatusCode != 400 || e.Error.Param == nil || *e.Error.Param != c.param || e.Error.Type != "invalid_request_error" {
			t.Errorf("%s: status %d error %+v, want 400 naming %s", c.body, resp.StatusCode, e.Error, c.param)
		}
	}
	resp := post(t, srv, "/v1/completions", `{"model":"other","prompt":[1]}`)
	if resp.StatusCode != 404 {
		t.Errorf("unknown model: status %d, want 404", resp.StatusCode)
	}
}

// rank 0's refusals keep their meaning over HTTP: the field, or the
// status a client should retry on (with the resume window off: within it,
// the gateway resubmits a request refused as unavailable).
func TestRank0RefusalsMapToStatus(t *testing.T) {
	for _, c := range []struct {
		rep        api.GenerateReply
		status     int
		retryAfter bool
		param      string // what the client sent: prompt, not the NATS field
	}{
		{api.GenerateReply{ErrorCode: api.CodeInvalid, ErrorParam: "prompt_token_ids[0]", Error: "prompt_token_ids[0]: token 5000 out of range [0, 1000)"}, 400, false, "prompt"},
		{api.GenerateReply{ErrorCode: api.CodeOverloaded, Error: "overloaded"}, 429, true, ""},
		{api.GenerateReply{ErrorCode: api.CodeUnavailable, Error: "re-forming"}, 503, true, ""},
	} {
		g, f := newTestGateway(t, "x", func(c *Config) { c.ResumeWindow = 0 })
		rep := c.rep
		rep.Done, rep.FinishReason = true, api.FinishError
		f.fail = &rep
		srv := serve(t, g)
		for _, stream := range []string{"false", "true"} {
			resp := post(t, srv, "/v1/completions", `{"prompt":[1],"stream":`+stream+`}`)
			if resp.StatusCode != c.status || (resp.Header.Get("Retry-After") != "") != c.retryAfter {
				t.Errorf("%s (stream %s): status %d Retry-After %q, want %d", c.rep.ErrorCode, stream, resp.StatusCode, resp.Header.Get("Retry-After"), c.status)
			}
			if c.param != "" {
				e := decode[errorBody](t, resp)
				if e.Error.Param == nil || *e.Error.Param != c.param || !strings.Contains(e.Error.Message, c.rep.ErrorParam) {
					t.Errorf("param %v message %q, want %s naming %s", e.Error.Param, e.Error.Message, c.param, c.rep.ErrorParam)
				}
			}
		}
	}
}

func TestAPIKeys(t *testing.T) {
	g, _ := newTestGateway(t, "ab", func(c *Config) { c.APIKeys = []string{"k1", "k2"} })
	srv := serve(t, g)
	for _, c := range []struct {
		auth   string
		status int
	}{{"", 401}, {"Bearer nope", 401}, {"Basic k1", 401}, {"Bearer k2", 200}} {
		resp := post(t, srv, "/v1/completions", `{"prompt":[1],"max_tokens":1}`, "Authorization", c.auth)
		if resp.StatusCode != c.status {
			t.Errorf("Authorization %q: status %d, want %d", c.auth, resp.StatusCode, c.status)
		}
	}
	resp, err := srv.Client().Get(srv.URL + "/health")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("/health without a key: %v %v", resp, err)
	}
	resp.Body.Close()
}

func TestChatNeedsATemplate(t *testing.T) {
	body := `{"messages":[{"role":"user","content":"hi"}],"max_tokens":3}`
	for _, opts := range [][]Option{nil, {WithTokenizer(byteTokenizer{})}} {
		g, _ := newTestGateway(t, "abc", nil, opts...)
		resp := post(t, serve(t, g), "/v1/chat/completions", body)
		if e := decode[errorBody](t, resp); resp.StatusCode != 400 || !strings.Contains(e.Error.Message, "chat template") {
			t.Errorf("status %d %q, want 400 about the chat template", resp.StatusCode, e.Error.Message)
		}
	}
	g, f := newTestGateway(t, "abc", nil, WithTokenizer(byteTokenizer{template: true}))
	resp := post(t, serve(t, g), "/v1/chat/completions", body)
	r := decode[chatResponse](t, resp)
	if resp.StatusCode != 200 || *r.Choices[0].Message.Content != "abc" || r.Object != "chat.completion" {
		t.Fatalf("status %d %+v", resp.StatusCode, r)
	}
	if got := string(bytesOf(f.requests()[0].PromptTokenIDs)); got != "<user>hi\n<assistant>" {
		t.Fatalf("prompt %q", got)
	}
}

func TestChatStreamOpensWithRole(t *testing.T) {
	g, _ := newTestGateway(t, "abc", nil, WithTokenizer(byteTokenizer{template: true}))
	resp := post(t, serve(t, g), "/v1/chat/completions", `{"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"max_tokens":3,"stream":true}`)
	ev := events(t, resp)
	var first chatResponse
	if err := json.Unmarshal([]byte(ev[0]), &first); err != nil {
		t.Fatal(err)
	}
	if d := first.Choices[0].Delta; d.Role != "assistant" || first.Object != "chat.completion.chunk" {
		t.Fatalf("first chunk %s", ev[0])
	}
	var text strings.Builder
	for _, e := range ev[1:] {
		var ch chatResponse
		_ = json.Unmarshal([]byte(e), &ch)
		if c := ch.Choices[0].Delta.Content; c != nil {
			text.WriteString(*c)
		}
	}
	if text.String() != "abc" {
		t.Fatalf("streamed %q", text.String())
	}
}

// A client that goes away cancels its request at rank 0.
func TestDisconnectCancels(t *testing.T) {
	g, f := newTestGateway(t, strings.Repeat("x", 100), nil)
	f.hold = make(chan struct{})
	srv := serve(t, g)
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/completions", strings.NewReader(`{"prompt":[1],"max_tokens":100,"stream":true}`))
	resp, err := srv.Client().Do(reqAfterToken(f, req))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close() // the client goes away mid-stream
	// Rank 0 holds its next token meanwhile: had it been let go on, it
	// could finish the request before the gateway sees the disconnect.
	poll.Until(t, 10*time.Second, "rank 0 gets the cancel", func() bool { return f.cancels() > 0 })
	f.hold <- struct{}{} // rank 0 goes on: it sees the cancel and answers it
}

// reqAfterToken lets the fake rank 0 send one token once the request is
// out, so the response headers arrive.
func reqAfterToken(f *fakeRank0, r *http.Request) *http.Request {
	go func() { // ends when the fake takes it or stops
		select {
		case f.hold <- struct{}{}:
		case <-f.stop:
		}
	}()
	return r
}

func TestCORSOffByDefault(t *testing.T) {
	for _, origins := range [][]string{nil, {"https://app.example"}} {
		g, _ := newTestGateway(t, "a", func(c *Config) { c.CORSOrigins = origins })
		srv := serve(t, g)
		req, _ := http.NewRequest(http.MethodOptions, srv.URL+"/v1/completions", nil)
		req.Header.Set("Origin", "https://app.example")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		got := resp.Header.Get("Access-Control-Allow-Origin")
		if (got != "") != (origins != nil) {
			t.Errorf("origins %v: Access-Control-Allow-Origin %q", origins, got)
		}
		// A page's script may read the answer's seed.
		if expose := resp.Header.Get("Access-Control-Expose-Headers"); (expose == SeedHeader) != (origins != nil) {
			t.Errorf("origins %v: Access-Control-Expose-Headers %q", origins, expose)
		}
	}
}

func TestRequestTimeoutIs504(t *testing.T) {
	g, f := newTestGateway(t, "abc", func(c *Config) { c.RequestTimeout = 200 * time.Millisecond })
	f.hold = make(chan struct{}) // rank 0 never sends a token
	resp := post(t, serve(t, g), "/v1/completions", `{"prompt":[1],"max_tokens":3}`)
	if e := decode[errorBody](t, resp); resp.StatusCode != 504 || e.Error.Type != "timeout" {
		t.Fatalf("status %d %+v, want 504 timeout", resp.StatusCode, e.Error)
	}
}

func TestMetricsUseVLLMNames(t *testing.T) {
	g, _ := newTestGateway(t, "abcd", nil)
	srv := serve(t, g)
	post(t, srv, "/v1/completions", `{"prompt":[1,2],"max_tokens":3}`)
	// Two choices of one prompt: the prompt counts once, as in usage.
	post(t, srv, "/v1/completions", `{"prompt":[1,2,3],"max_tokens":3,"n":2}`)
	resp, err := srv.Client().Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, want := range []string{
		`tpcoord_time_to_first_token_seconds_count{model_name="m"} 3`,
		`tpcoord_inter_token_latency_seconds_count{model_name="m"} 6`,
		`tpcoord_e2e_request_latency_seconds_count{model_name="m"} 3`,
		`tpcoord_request_queue_time_seconds_count{model_name="m"} 3`,
		`tpcoord_prompt_tokens_total{model_name="m"} 5`,
		`tpcoord_generation_tokens_total{model_name="m"} 9`,
		`tpcoord_request_success_total{finished_reason="length",model_name="m"} 3`,
		`tpcoord_num_requests_running{model_name="m"} 0`,
		`tpcoord_num_requests_waiting{model_name="m"} 0`,
		`tpcoord_build_info{`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestMetricsKVCache: rank 0's KV cache, from its status, on the
// gateway's /metrics under vLLM's names.
func TestMetricsKVCache(t *testing.T) {
	g, f := newTestGateway(t, "ab", nil)
	f.kv = &api.KVStatus{BlockSize: 16, Blocks: 400, Used: 100, Preemptions: 3, PrefixCacheQueries: 2048, PrefixCacheHits: 512}
	srv := serve(t, g)
	resp, err := srv.Client().Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, want := range []string{
		`tpcoord_kv_cache_usage_perc{model_name="m"} 0.25`,
		`tpcoord_num_preemptions_total{model_name="m"} 3`,
		`tpcoord_prefix_cache_queries_total{model_name="m"} 2048`,
		`tpcoord_prefix_cache_hits_total{model_name="m"} 512`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/metrics lacks %s:\n%s", want, b)
		}
	}
}

func TestPromptTextBounded(t *testing.T) {
	g, f := newTestGateway(t, "a", nil, WithTokenizer(byteTokenizer{template: true}))
	srv := serve(t, g)
	long := strings.Repeat("a", MaxPromptBytes+1)
	for _, c := range []struct{ path, body string }{
		{"/v1/completions", `{"prompt":"` + long + `"}`},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"` + long + `"}]}`},
	} {
		resp := post(t, srv, c.path, c.body)
		if e := decode[errorBody](t, resp); resp.StatusCode != 400 || !strings.Contains(e.Error.Message, "at most") {
			t.Errorf("%s: status %d %q, want 400 naming the bound", c.path, resp.StatusCode, e.Error.Message)
		}
	}
	if n := len(f.requests()); n != 0 {
		t.Fatalf("rank 0 got %d requests", n)
	}
}
