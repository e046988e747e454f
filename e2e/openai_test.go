package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/respjson"

	"github.com/tpcoord/tpcoord/coordinator/gateway/tokenizer"
	"github.com/tpcoord/tpcoord/internal/poll"
)

// These tests drive `launch --http` with the official openai-go client, as
// an application would: they check that its types decode what the gateway
// sends, and that the gateway refuses, cancels and sheds load as the API
// says.

// openaiJob is a job launched with --http, and an openai-go client of it.
type openaiJob struct {
	*job
	client openai.Client
}

// launchHTTP launches a 2-rank job serving the API on a free loopback
// port; the client sends key (none if empty).
func launchHTTP(t *testing.T, key string, args ...string) *openaiJob {
	t.Helper()
	j := launch(t, append([]string{"--nproc", "2", "--http", "127.0.0.1:0"}, args...)...)
	if !strings.HasPrefix(j.info.HTTPURL, "http://127.0.0.1:") || !strings.HasSuffix(j.info.HTTPURL, "/v1") {
		t.Fatalf("ready file's http_url is %q, want http://127.0.0.1:PORT/v1", j.info.HTTPURL)
	}
	return &openaiJob{job: j, client: newOpenAIClient(j.info.HTTPURL, key)}
}

// newOpenAIClient is a client of the API at url that never retries, so a
// refusal is seen as it is.
func newOpenAIClient(url, key string) openai.Client {
	return openai.NewClient(option.WithBaseURL(url+"/"), option.WithAPIKey(key), option.WithMaxRetries(0))
}

// root is the gateway's URL without /v1: where /health, /ready and
// /metrics are.
func (oj *openaiJob) root() string { return strings.TrimSuffix(oj.info.HTTPURL, "/v1") }

// ignoreEOS is vLLM's extension: the synthetic model may draw its EOS
// token, and these tests want exactly max_tokens tokens.
var ignoreEOS = option.WithJSONSet("ignore_eos", true)

// seeded is a completion of the token prompt 1,2,3 with seed and
// max_tokens.
func seeded(model string, seed, maxTokens int64) openai.CompletionNewParams {
	return openai.CompletionNewParams{
		Model:     openai.CompletionNewParamsModel(model),
		Prompt:    openai.CompletionNewParamsPromptUnion{OfArrayOfTokens: []int64{1, 2, 3}},
		MaxTokens: openai.Int(maxTokens),
		Seed:      openai.Int(seed),
	}
}

// tokenIDs reads vLLM's token_ids extension off a choice (nil if null).
func tokenIDs(t *testing.T, extra map[string]respjson.Field) []int32 {
	t.Helper()
	f, ok := extra["token_ids"]
	if !ok {
		t.Fatalf("the choice has no token_ids (fields %v)", slices.Collect(maps.Keys(extra)))
	}
	var ids []int32
	if err := json.Unmarshal([]byte(f.Raw()), &ids); err != nil {
		t.Fatalf("token_ids %s: %v", f.Raw(), err)
	}
	return ids
}

// apiError returns err as the client's API error, failing the test if it
// is something else.
func apiError(t *testing.T, err error) *openai.Error {
	t.Helper()
	var e *openai.Error
	if !errors.As(err, &e) {
		t.Fatalf("got %v (%T), want an API error", err, err)
	}
	return e
}

func testContext(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// get fetches url and returns its status and body.
func get(ctx context.Context, url string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// metricValue is the value of the sample of name whose labels include
// every one of labels (`key="value"`), or -1 if there is none.
func metricValue(exposition, name string, labels ...string) float64 {
	sc := bufio.NewScanner(strings.NewReader(exposition))
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest != "" && rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		if !allIn(rest, labels) {
			continue
		}
		f := strings.Fields(rest)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			return v
		}
	}
	return -1
}

func allIn(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// TestOpenAICompletions: token-ID completions through openai-go, whole
// and streamed, agree with each other and with the NATS client; n seeded
// choices draw with seed+i; invalid fields are refused naming them; the
// service endpoints answer.
func TestOpenAICompletions(t *testing.T) {
	t.Parallel()
	oj := launchHTTP(t, "", "--job", "e2e-openai", "--vocab", "1000", "--forward-time", "1ms")
	t.Run("whole", func(t *testing.T) { testCompletionWhole(t, oj) })
	t.Run("streamed", func(t *testing.T) { testCompletionStreamed(t, oj) })
	t.Run("as over NATS", func(t *testing.T) { testCompletionAsNATS(t, oj) })
	t.Run("invalid fields", func(t *testing.T) { testCompletionInvalid(t, oj) })
	t.Run("endpoints", func(t *testing.T) { testServiceEndpoints(t, oj) })
}

func testCompletionWhole(t *testing.T, oj *openaiJob) {
	ctx := testContext(t, 60*time.Second)
	c, err := oj.client.Completions.New(ctx, seeded(oj.info.Job, 42, 8), ignoreEOS)
	if err != nil {
		t.Fatal(err)
	}
	if c.Object != "text_completion" || c.Model != oj.info.Job || !strings.HasPrefix(c.ID, "cmpl-") || len(c.Choices) != 1 {
		t.Fatalf("completion %s", c.RawJSON())
	}
	ch := c.Choices[0]
	if ch.FinishReason != openai.CompletionChoiceFinishReasonLength || ch.Index != 0 || ch.Text != "" {
		t.Errorf("choice %s: want finish_reason length, index 0, no text (no tokenizer)", ch.RawJSON())
	}
	if ids := tokenIDs(t, ch.JSON.ExtraFields); len(ids) != 8 {
		t.Errorf("token_ids %v: want 8 (max_tokens)", ids)
	}
	if u := c.Usage; u.PromptTokens != 3 || u.CompletionTokens != 8 || u.TotalTokens != 11 {
		t.Errorf("usage %s: want 3 prompt, 8 completion, 11 total", u.RawJSON())
	}
}

// streamed is what a completion stream carried.
type streamed struct {
	tokens      []int32
	tokenChunks int // chunks that carried tokens
	finish      string
	usage       *openai.CompletionUsage
}

func testCompletionStreamed(t *testing.T, oj *openaiJob) {
	ctx := testContext(t, 60*time.Second)
	whole, err := oj.client.Completions.New(ctx, seeded(oj.info.Job, 7, 12), ignoreEOS)
	if err != nil {
		t.Fatal(err)
	}
	want := tokenIDs(t, whole.Choices[0].JSON.ExtraFields)
	p := seeded(oj.info.Job, 7, 12)
	p.StreamOptions.IncludeUsage = openai.Bool(true)
	got := readCompletionStream(t, oj.client.Completions.NewStreaming(ctx, p, ignoreEOS))
	if !slices.Equal(got.tokens, want) {
		t.Errorf("streamed tokens %v, whole %v: the same seeded request must give the same tokens", got.tokens, want)
	}
	if got.tokenChunks != 12 {
		t.Errorf("%d chunks carried tokens, want one a token (12)", got.tokenChunks)
	}
	if got.finish != "length" {
		t.Errorf("finish_reason %q, want length", got.finish)
	}
	if u := got.usage; u == nil || u.PromptTokens != 3 || u.CompletionTokens != 12 || u.TotalTokens != 15 {
		t.Errorf("usage chunk %+v: want 3 prompt, 12 completion, 15 total", u)
	}
}

// readCompletionStream reads a one-choice stream to its end: token chunks
// (one token each), then the chunk with the finish reason, then the usage
// chunk (no choices) if asked for.
func readCompletionStream(t *testing.T, s interface {
	Next() bool
	Current() openai.Completion
	Err() error
	Close() error
}) streamed {
	t.Helper()
	defer s.Close()
	var st streamed
	for s.Next() {
		c := s.Current()
		if st.usage != nil {
			t.Fatalf("chunk after the usage chunk: %s", c.RawJSON())
		}
		if len(c.Choices) == 0 {
			if !c.JSON.Usage.Valid() {
				t.Fatalf("chunk with neither choices nor usage: %s", c.RawJSON())
			}
			st.usage = &c.Usage
			continue
		}
		ch := c.Choices[0]
		if st.finish != "" {
			t.Fatalf("choice chunk after the finish: %s", c.RawJSON())
		}
		ids := tokenIDs(t, ch.JSON.ExtraFields)
		if len(ids) > 1 {
			t.Errorf("chunk with %d tokens, want one a chunk: %s", len(ids), c.RawJSON())
		}
		if len(ids) > 0 {
			st.tokenChunks++
		}
		st.tokens = append(st.tokens, ids...)
		st.finish = string(ch.FinishReason)
	}
	if err := s.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	return st
}

// testCompletionAsNATS: the gateway sends what `tpcoord generate` sends,
// so a seeded request gives the same tokens either way. With n choices,
// choice i draws with seed+i: each is reproducible on its own, and they
// differ.
func testCompletionAsNATS(t *testing.T, oj *openaiJob) {
	ctx := testContext(t, 90*time.Second)
	p := seeded(oj.info.Job, 42, 8)
	p.N = openai.Int(2)
	c, err := oj.client.Completions.New(ctx, p, ignoreEOS)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Choices) != 2 || c.Usage.CompletionTokens != 16 {
		t.Fatalf("n=2: %s", c.RawJSON())
	}
	var byChoice [2][]int32
	for i, ch := range c.Choices {
		if ch.Index != int64(i) || ch.FinishReason != "length" {
			t.Fatalf("choice %d: %s", i, ch.RawJSON())
		}
		byChoice[i] = tokenIDs(t, ch.JSON.ExtraFields)
		g, err := oj.generate(ctx, "--prompt", "1,2,3", "--max-tokens", "8", "--seed", strconv.Itoa(42+i), "--ignore-eos")
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(byChoice[i], g.Tokens) || g.FinishReason != "length" {
			t.Errorf("choice %d: HTTP gave %v, generate --seed %d gave %v (%s)", i, byChoice[i], 42+i, g.Tokens, g.FinishReason)
		}
	}
	if slices.Equal(byChoice[0], byChoice[1]) {
		t.Errorf("both choices drew %v: choice 1 must draw with seed+1", byChoice[0])
	}
	one, err := oj.client.Completions.New(ctx, seeded(oj.info.Job, 42, 8), ignoreEOS)
	if err != nil {
		t.Fatal(err)
	}
	if ids := tokenIDs(t, one.Choices[0].JSON.ExtraFields); !slices.Equal(ids, byChoice[0]) {
		t.Errorf("n=1 gave %v, choice 0 of n=2 gave %v: both draw with the seed", ids, byChoice[0])
	}
}

func testCompletionInvalid(t *testing.T, oj *openaiJob) {
	ctx := testContext(t, 60*time.Second)
	cases := []struct {
		name   string
		edit   func(*openai.CompletionNewParams)
		opts   []option.RequestOption
		status int
		param  string
	}{
		{"negative temperature", func(p *openai.CompletionNewParams) { p.Temperature = openai.Float(-1) }, nil, 400, "temperature"},
		{"unknown field", func(*openai.CompletionNewParams) {}, []option.RequestOption{option.WithJSONSet("temprature", 0.5)}, 400, "temprature"},
		{"zero max_tokens", func(p *openai.CompletionNewParams) { p.MaxTokens = openai.Int(0) }, nil, 400, "max_tokens"},
		{"n too large", func(p *openai.CompletionNewParams) { p.N = openai.Int(65) }, nil, 400, "n"},
		{"top_p above 1", func(p *openai.CompletionNewParams) { p.TopP = openai.Float(1.5) }, nil, 400, "top_p"},
		{"echo", func(p *openai.CompletionNewParams) { p.Echo = openai.Bool(true) }, nil, 400, "echo"},
		{"stop without a tokenizer", func(p *openai.CompletionNewParams) {
			p.Stop = openai.CompletionNewParamsStopUnion{OfString: openai.String("x")}
		}, nil, 400, "stop"},
		{"text without a tokenizer", func(p *openai.CompletionNewParams) {
			p.Prompt = openai.CompletionNewParamsPromptUnion{OfString: openai.String("hello")}
		}, nil, 400, "prompt"},
		{"prompt token beyond the vocabulary", func(p *openai.CompletionNewParams) {
			p.Prompt = openai.CompletionNewParamsPromptUnion{OfArrayOfTokens: []int64{1, 5000}}
		}, nil, 400, "prompt"},
		{"prompt tokens beyond a sequence", func(p *openai.CompletionNewParams) {
			p.Prompt = openai.CompletionNewParamsPromptUnion{OfArrayOfTokens: make([]int64, 1<<20)}
		}, nil, 400, "prompt"},
		{"another model", func(p *openai.CompletionNewParams) { p.Model = "gpt-3.5-turbo-instruct" }, nil, 404, "model"},
	}
	for _, tc := range cases {
		p := seeded(oj.info.Job, 1, 4)
		tc.edit(&p)
		_, err := oj.client.Completions.New(ctx, p, tc.opts...)
		e := apiError(t, err)
		if e.StatusCode != tc.status || e.Param != tc.param || e.Type != "invalid_request_error" || !strings.Contains(e.Message, tc.param) {
			t.Errorf("%s: got %d param %q type %q message %q; want %d naming %q", tc.name, e.StatusCode, e.Param, e.Type, e.Message, tc.status, tc.param)
		}
	}
	_, err := oj.client.Chat.Completions.New(ctx, chatParams(oj.info.Job, 1, 4))
	if e := apiError(t, err); e.StatusCode != http.StatusBadRequest || e.Param != "messages" || !strings.Contains(e.Message, "tokenizer") {
		t.Errorf("chat without a tokenizer: %d param %q message %q; want 400 naming messages", e.StatusCode, e.Param, e.Message)
	}
}

func testServiceEndpoints(t *testing.T, oj *openaiJob) {
	ctx := testContext(t, 60*time.Second)
	if _, err := oj.client.Completions.New(ctx, seeded(oj.info.Job, 3, 2)); err != nil {
		t.Fatal(err)
	}
	page, err := oj.client.Models.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Data) != 1 || page.Data[0].ID != oj.info.Job || page.Data[0].OwnedBy != "tpcoord" {
		t.Errorf("models %s: want the job's model only", page.RawJSON())
	}
	if code, body, err := get(ctx, oj.root()+"/health"); err != nil || code != http.StatusOK {
		t.Errorf("/health: %d %q %v", code, body, err)
	}
	poll.UntilDetail(t, 30*time.Second, "/ready 200", func() (bool, string) {
		code, body, err := get(ctx, oj.root()+"/ready")
		return err == nil && code == http.StatusOK && strings.Contains(body, `"world_size":2`), fmt.Sprintf("%d %s %v", code, body, err)
	})
	if code, body, err := get(ctx, oj.root()+"/version"); err != nil || code != http.StatusOK || !strings.HasPrefix(body, `{"version":"`) {
		t.Errorf("/version: %d %q %v", code, body, err)
	}
	// The client decodes the unmatched paths' and methods' errors.
	if e := apiError(t, oj.client.Get(ctx, "embeddings", nil, nil)); e.StatusCode != http.StatusNotFound || e.Type != "invalid_request_error" {
		t.Errorf("GET /v1/embeddings: %d %q %q, want 404 invalid_request_error", e.StatusCode, e.Type, e.Message)
	}
	if e := apiError(t, oj.client.Get(ctx, "completions", nil, nil)); e.StatusCode != http.StatusMethodNotAllowed || !strings.Contains(e.Message, "POST") {
		t.Errorf("GET /v1/completions: %d %q, want 405 naming POST", e.StatusCode, e.Message)
	}
	code, body, err := get(ctx, oj.root()+"/metrics")
	if err != nil || code != http.StatusOK {
		t.Fatalf("/metrics: %d %v", code, err)
	}
	model := `model_name="` + oj.info.Job + `"`
	if v := metricValue(body, "tpcoord_time_to_first_token_seconds_count", model); v < 1 {
		t.Errorf("tpcoord_time_to_first_token_seconds_count = %v after requests, want > 0", v)
	}
	if v := metricValue(body, "tpcoord_generation_tokens_total", model); v < 2 {
		t.Errorf("tpcoord_generation_tokens_total = %v, want >= 2", v)
	}
}

// TestOpenAIDisconnect: a client that goes away mid-stream cancels its
// request: rank 0 frees the row long before max_tokens, and rank 0 and
// the gateway count it as cancelled (aborted, in vLLM's word).
func TestOpenAIDisconnect(t *testing.T) {
	t.Parallel()
	const maxTokens = 5000 // 100 s at 20 ms a step: a freed row was cancelled
	oj := launchHTTP(t, "", "--job", "e2e-openai-cancel", "--forward-time", "20ms", "--metrics-addr", "127.0.0.1:0")
	ctx, cancel := context.WithCancel(testContext(t, 90*time.Second))
	s := oj.client.Completions.NewStreaming(ctx, seeded(oj.info.Job, 5, maxTokens), ignoreEOS)
	for i := range 2 {
		if !s.Next() {
			t.Fatalf("chunk %d: stream ended: %v", i, s.Err())
		}
	}
	ranks, err := oj.status()
	if err != nil || len(ranks) != 2 || ranks[0].Rows != 1 {
		t.Fatalf("while streaming: rank 0 should decode one row: %+v %v", ranks, err)
	}
	cancel()
	_ = s.Close()
	poll.UntilDetail(t, 30*time.Second, "rank 0 frees the row", func() (bool, string) {
		ranks, err := oj.status()
		return err == nil && len(ranks) == 2 && ranks[0].Rows == 0, fmt.Sprintf("%+v %v", ranks, err)
	})
	if ranks, _ := oj.status(); len(ranks) == 2 && ranks[0].Step >= maxTokens {
		t.Fatalf("rank 0 ran %d steps: the request ran to its end, not cancelled", ranks[0].Step)
	}
	rank0 := "http://" + ranks[0].MetricsAddr + "/metrics"
	poll.UntilDetail(t, 30*time.Second, "rank 0 counts the request cancelled", func() (bool, string) {
		_, body, err := get(context.Background(), rank0)
		v := metricValue(body, "tpcoord_requests_total", `finish_reason="cancelled"`)
		return err == nil && v == 1, fmt.Sprintf("%v %v", v, err)
	})
	poll.UntilDetail(t, 30*time.Second, "the gateway counts the request aborted", func() (bool, string) {
		_, body, err := get(context.Background(), oj.root()+"/metrics")
		v := metricValue(body, "tpcoord_request_success_total", `finished_reason="abort"`)
		return err == nil && v == 1, fmt.Sprintf("%v %v", v, err)
	})
}

// TestOpenAIAuth: with --api-key-file, /v1 needs one of its keys; a
// missing or wrong key gets 401 authentication_error. /health does not.
func TestOpenAIAuth(t *testing.T) {
	t.Parallel()
	keyFile := filepath.Join(t.TempDir(), "api-keys")
	if err := os.WriteFile(keyFile, []byte("# the e2e key\nsk-e2e-right\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	oj := launchHTTP(t, "sk-e2e-right", "--job", "e2e-openai-auth", "--api-key-file", keyFile)
	ctx := testContext(t, 60*time.Second)
	for _, key := range []string{"", "sk-e2e-wrong", "sk-e2e-righ"} {
		c := newOpenAIClient(oj.info.HTTPURL, key)
		_, err := c.Completions.New(ctx, seeded(oj.info.Job, 1, 2))
		if e := apiError(t, err); e.StatusCode != http.StatusUnauthorized || e.Type != "authentication_error" {
			t.Errorf("completion with key %q: %d %q, want 401 authentication_error", key, e.StatusCode, e.Type)
		}
		_, err = c.Models.List(ctx)
		if e := apiError(t, err); e.StatusCode != http.StatusUnauthorized {
			t.Errorf("models with key %q: %d, want 401", key, e.StatusCode)
		}
	}
	c, err := oj.client.Completions.New(ctx, seeded(oj.info.Job, 1, 2), ignoreEOS)
	if err != nil {
		t.Fatalf("with the right key: %v", err)
	}
	if ids := tokenIDs(t, c.Choices[0].JSON.ExtraFields); len(ids) != 2 {
		t.Errorf("with the right key: token_ids %v, want 2", ids)
	}
	if code, _, err := get(ctx, oj.root()+"/health"); err != nil || code != http.StatusOK {
		t.Errorf("/health without a key: %d %v, want 200", code, err)
	}
}

// TestOpenAIOverload: with one batch slot and one queue slot both taken,
// a request gets 429 rate_limit_error with Retry-After. More choices than
// the queue holds (n = 4 with --max-queue 1, so more than batch, queue and
// intake together) are refused at once with 400 naming n and the queue,
// never 429 (finding 4).
func TestOpenAIOverload(t *testing.T) {
	t.Parallel()
	oj := launchHTTP(t, "", "--job", "e2e-openai-overload", "--forward-time", "20ms", "--max-batch", "1", "--max-queue", "1")
	ctx := testContext(t, 90*time.Second)
	group := seeded(oj.info.Job, 1, 2)
	group.N = openai.Int(4)
	for range 2 {
		_, err := oj.client.Completions.New(ctx, group)
		if e := apiError(t, err); e.StatusCode != http.StatusBadRequest || e.Param != "n" ||
			!strings.Contains(e.Message, "4 choices") || !strings.Contains(e.Message, "--max-queue 1") {
			t.Fatalf("n = 4 with --max-queue 1: %d %q (param %q), want 400 naming n, 4 and --max-queue 1", e.StatusCode, e.Message, e.Param)
		}
	}
	long, stopLong := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stopLong()
	// One at a time: two arriving together could find the queue slot
	// still taken by the first, not yet in the batch.
	for i, what := range []string{"one request decoding", "one request decoding, one waiting"} {
		wg.Go(func() { _, _ = oj.client.Completions.New(long, seeded(oj.info.Job, int64(i), 5000), ignoreEOS) })
		poll.UntilDetail(t, 30*time.Second, what, func() (bool, string) {
			ranks, err := oj.status()
			return err == nil && len(ranks) == 2 && ranks[0].Rows == 1 && ranks[0].Waiting == i, fmt.Sprintf("%+v %v", ranks, err)
		})
	}
	var last error
	poll.UntilDetail(t, 30*time.Second, "a 429", func() (bool, string) {
		_, last = oj.client.Completions.New(ctx, seeded(oj.info.Job, 9, 1))
		var e *openai.Error
		return errors.As(last, &e) && e.StatusCode == http.StatusTooManyRequests, fmt.Sprint(last)
	})
	e := apiError(t, last)
	if e.Type != "rate_limit_error" || e.Code != "overloaded" {
		t.Errorf("429 of type %q code %q, want rate_limit_error overloaded", e.Type, e.Code)
	}
	if ra := e.Response.Header.Get("Retry-After"); ra != "1" {
		t.Errorf("Retry-After %q, want 1 (second)", ra)
	}
}

// TestOpenAIText: with --tokenizer, prompts and answers are text: the
// text equals the tokenizer's decoding of token_ids, whole or streamed;
// chat completions render the fixture's chat template; a stop string ends
// the text before it, with finish_reason stop.
func TestOpenAIText(t *testing.T) {
	t.Parallel()
	dir, err := filepath.Abs(filepath.Join("testdata", "tokenizer"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	// The job's vocabulary is the tokenizer's, so every token drawn decodes.
	oj := launchHTTP(t, "", "--job", "e2e-openai-text", "--forward-time", "1ms", "--tokenizer", dir, "--vocab", strconv.Itoa(tok.VocabSize()),
		"--max-model-len", "4096")
	t.Run("completion", func(t *testing.T) { testTextCompletion(t, oj, tok) })
	t.Run("tokenize", func(t *testing.T) { testTokenize(t, oj, tok) })
	t.Run("stop string", func(t *testing.T) { testStopString(t, oj) })
	t.Run("chat", func(t *testing.T) { testChat(t, oj, tok) })
	t.Run("chat streamed", func(t *testing.T) { testChatStreamed(t, oj) })
}

// testTokenize: vLLM's /tokenize and /detokenize, through the client's
// generic Post at the gateway's root (../ of /v1/), agree with the
// tokenizer, and /tokenize reports the agents' --max-model-len.
func testTokenize(t *testing.T, oj *openaiJob, tok *tokenizer.Tokenizer) {
	ctx := testContext(t, 30*time.Second)
	const prompt = "Hello world, the quick brown fox"
	want, err := tok.Encode(prompt, true)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Count       int     `json:"count"`
		MaxModelLen int     `json:"max_model_len"`
		Tokens      []int32 `json:"tokens"`
	}
	if err := oj.client.Post(ctx, "../tokenize", map[string]any{"model": oj.info.Job, "prompt": prompt}, &got); err != nil {
		t.Fatal(err)
	}
	if got.Count != len(want) || !slices.Equal(got.Tokens, want) || got.MaxModelLen != 4096 {
		t.Errorf("/tokenize: %+v, want tokens %v and max_model_len 4096", got, want)
	}
	var text struct {
		Prompt string `json:"prompt"`
	}
	if err := oj.client.Post(ctx, "../detokenize", map[string]any{"tokens": want}, &text); err != nil {
		t.Fatal(err)
	}
	if text.Prompt != prompt {
		t.Errorf("/detokenize: %q, want %q", text.Prompt, prompt)
	}
	err = oj.client.Post(ctx, "../detokenize", map[string]any{"tokens": []int{tok.VocabSize()}}, nil)
	if e := apiError(t, err); e.StatusCode != http.StatusBadRequest || e.Param != "tokens" {
		t.Errorf("/detokenize out of the vocabulary: %d param %q, want 400 naming tokens", e.StatusCode, e.Param)
	}
}

func textPrompt(model, prompt string, seed, maxTokens int64) openai.CompletionNewParams {
	p := seeded(model, seed, maxTokens)
	p.Prompt = openai.CompletionNewParamsPromptUnion{OfString: openai.String(prompt)}
	return p
}

func testTextCompletion(t *testing.T, oj *openaiJob, tok *tokenizer.Tokenizer) {
	ctx := testContext(t, 60*time.Second)
	const prompt = "Hello world, the quick brown fox"
	c, err := oj.client.Completions.New(ctx, textPrompt(oj.info.Job, prompt, 11, 24), ignoreEOS)
	if err != nil {
		t.Fatal(err)
	}
	ch := c.Choices[0]
	ids := tokenIDs(t, ch.JSON.ExtraFields)
	want, err := tok.Decode(ids)
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 24 || ch.Text != want || ch.FinishReason != "length" {
		t.Errorf("text %q, token_ids %v decode to %q; want them equal, 24 tokens, finish length (%s)", ch.Text, ids, want, ch.FinishReason)
	}
	enc, err := tok.Encode(prompt, true)
	if err != nil {
		t.Fatal(err)
	}
	if c.Usage.PromptTokens != int64(len(enc)) || enc[0] != 1 {
		t.Errorf("prompt_tokens %d, the tokenizer encodes the prompt to %v (with <s> first)", c.Usage.PromptTokens, enc)
	}
	var streamedText strings.Builder
	s := oj.client.Completions.NewStreaming(ctx, textPrompt(oj.info.Job, prompt, 11, 24), ignoreEOS)
	for s.Next() {
		if cs := s.Current().Choices; len(cs) > 0 {
			streamedText.WriteString(cs[0].Text)
		}
	}
	if err := s.Err(); err != nil || streamedText.String() != ch.Text {
		t.Errorf("streamed text %q (%v), whole %q: want the same", streamedText.String(), err, ch.Text)
	}
}

// stopCandidate returns a 2-byte ASCII string of text whose first
// occurrence is in its second half (so the text kept before it is long),
// and where it is; ok false if none.
func stopCandidate(text string) (stop string, at int, ok bool) {
	for i := len(text) / 2; i+2 <= len(text); i++ {
		s := text[i : i+2]
		if s[0] > ' ' && s[0] < 0x7f && s[1] > ' ' && s[1] < 0x7f && strings.Index(text, s) == i {
			return s, i, true
		}
	}
	return "", 0, false
}

// testStopString: a seeded request draws the same tokens again, so a
// string taken from its text stops the second one there: the text ends
// just before the string's first occurrence, whole and streamed.
func testStopString(t *testing.T, oj *openaiJob) {
	ctx := testContext(t, 60*time.Second)
	var full string
	var stop string
	var at int
	for seed := int64(1); ; seed++ {
		c, err := oj.client.Completions.New(ctx, textPrompt(oj.info.Job, "Once upon a time", seed, 32), ignoreEOS)
		if err != nil {
			t.Fatal(err)
		}
		full = c.Choices[0].Text
		var ok bool
		if stop, at, ok = stopCandidate(full); ok {
			p := textPrompt(oj.info.Job, "Once upon a time", seed, 32)
			p.Stop = openai.CompletionNewParamsStopUnion{OfString: openai.String(stop)}
			t.Logf("seed %d: stop %q, first at byte %d of %q", seed, stop, at, full)
			checkStopped(t, oj, p, full[:at], stop)
			return
		}
		if seed == 20 {
			t.Fatalf("20 seeds drew no text with a 2-byte ASCII string first in its second half; last %q", full)
		}
	}
}

func checkStopped(t *testing.T, oj *openaiJob, p openai.CompletionNewParams, want, stop string) {
	t.Helper()
	ctx := testContext(t, 60*time.Second)
	c, err := oj.client.Completions.New(ctx, p, ignoreEOS)
	if err != nil {
		t.Fatal(err)
	}
	if ch := c.Choices[0]; ch.FinishReason != "stop" || ch.Text != want {
		t.Errorf("stop %q: text %q finish %q; want %q, stop", stop, ch.Text, ch.FinishReason, want)
	}
	var text strings.Builder
	var finish string
	s := oj.client.Completions.NewStreaming(ctx, p, ignoreEOS)
	for s.Next() {
		if cs := s.Current().Choices; len(cs) > 0 {
			text.WriteString(cs[0].Text)
			finish = string(cs[0].FinishReason)
		}
	}
	if err := s.Err(); err != nil || text.String() != want || finish != "stop" {
		t.Errorf("stop %q streamed: text %q finish %q (%v); want %q, stop", stop, text.String(), finish, err, want)
	}
}

func chatParams(model string, seed, maxTokens int64) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{
		Model:               openai.ChatModel(model),
		Messages:            []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("Be brief."), openai.UserMessage("Say hello.")},
		MaxCompletionTokens: openai.Int(maxTokens),
		Seed:                openai.Int(seed),
	}
}

func testChat(t *testing.T, oj *openaiJob, tok *tokenizer.Tokenizer) {
	ctx := testContext(t, 60*time.Second)
	c, err := oj.client.Chat.Completions.New(ctx, chatParams(oj.info.Job, 4, 16), ignoreEOS)
	if err != nil {
		t.Fatal(err)
	}
	if c.Object != "chat.completion" || len(c.Choices) != 1 || !strings.HasPrefix(c.ID, "chatcmpl-") {
		t.Fatalf("chat completion %s", c.RawJSON())
	}
	ch := c.Choices[0]
	ids := tokenIDs(t, ch.JSON.ExtraFields)
	want, err := tok.Decode(ids)
	if err != nil {
		t.Fatal(err)
	}
	if ch.Message.Role != "assistant" || ch.Message.Content != want || len(ids) != 16 || ch.FinishReason != "length" {
		t.Errorf("message %s, token_ids %v decode to %q", ch.RawJSON(), ids, want)
	}
	rendered, err := tok.ApplyChatTemplate([]tokenizer.ChatMessage{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Say hello."}}, true)
	if err != nil {
		t.Fatal(err)
	}
	enc, err := tok.Encode(rendered, false)
	if err != nil {
		t.Fatal(err)
	}
	if c.Usage.PromptTokens != int64(len(enc)) || c.Usage.CompletionTokens != 16 {
		t.Errorf("usage %s: the template renders %q, %d tokens", c.Usage.RawJSON(), rendered, len(enc))
	}
}

// testChatStreamed: the stream opens with the assistant's role, then
// carries the same content as the whole answer of the same seed.
func testChatStreamed(t *testing.T, oj *openaiJob) {
	ctx := testContext(t, 60*time.Second)
	whole, err := oj.client.Chat.Completions.New(ctx, chatParams(oj.info.Job, 6, 12), ignoreEOS)
	if err != nil {
		t.Fatal(err)
	}
	s := oj.client.Chat.Completions.NewStreaming(ctx, chatParams(oj.info.Job, 6, 12), ignoreEOS)
	defer s.Close()
	var content strings.Builder
	var roles []string
	var finish string
	for i := 0; s.Next(); i++ {
		c := s.Current()
		if c.Object != "chat.completion.chunk" || len(c.Choices) != 1 {
			t.Fatalf("chunk %d: %s", i, c.RawJSON())
		}
		d := c.Choices[0].Delta
		if d.Role != "" {
			roles = append(roles, fmt.Sprintf("%d:%s", i, d.Role))
		}
		content.WriteString(d.Content)
		finish = string(c.Choices[0].FinishReason)
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if len(roles) != 1 || roles[0] != "0:assistant" {
		t.Errorf("roles in the stream %v, want the assistant's in the first chunk only", roles)
	}
	if content.String() != whole.Choices[0].Message.Content || finish != "length" {
		t.Errorf("streamed %q (finish %q), whole %q", content.String(), finish, whole.Choices[0].Message.Content)
	}
}
