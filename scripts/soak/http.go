package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/coordinator/gateway"
)

// The paths a request of the load takes to the job.
const (
	pathGo      = "go"      // rank/client.Generate over NATS
	pathGateway = "gateway" // a streaming /v1/completions of `tpcoord serve`
)

var paths = []string{pathGo, pathGateway}

// completionBody is the /v1/completions request of a request of the mix.
// Every parameter is sent, with the value it has in the NATS request (the
// gateway then sends rank 0 the same request); the seed only if the soak
// drew one, so that the gateway seeds the others.
type completionBody struct {
	Prompt            []int32       `json:"prompt"`
	MaxTokens         int           `json:"max_tokens"`
	Temperature       float32       `json:"temperature"`
	TopK              int           `json:"top_k"`
	TopP              float32       `json:"top_p"`
	MinP              float32       `json:"min_p"`
	RepetitionPenalty float32       `json:"repetition_penalty"`
	PresencePenalty   float32       `json:"presence_penalty"`
	FrequencyPenalty  float32       `json:"frequency_penalty"`
	MinTokens         int           `json:"min_tokens"`
	IgnoreEOS         bool          `json:"ignore_eos"`
	Logprobs          *int          `json:"logprobs,omitempty"`
	Seed              *uint64       `json:"seed,omitempty"`
	Stream            bool          `json:"stream"`
	StreamOptions     streamOptions `json:"stream_options"`
}

// streamOptions asks for the usage chunk: its completion_tokens is the
// count the streamed tokens are checked against.
type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

func newCompletionBody(req *api.GenerateRequest) completionBody {
	p := &req.Params
	return completionBody{
		Prompt: req.PromptTokenIDs, MaxTokens: req.MaxTokens, Temperature: p.Temperature, TopK: p.TopK, TopP: p.TopP, MinP: p.MinP,
		RepetitionPenalty: p.RepetitionPenalty, PresencePenalty: p.PresencePenalty, FrequencyPenalty: p.FrequencyPenalty,
		MinTokens: p.MinTokens, IgnoreEOS: p.IgnoreEOS, Logprobs: p.Logprobs, Seed: p.Seed,
		Stream: true, StreamOptions: streamOptions{IncludeUsage: true},
	}
}

// gatewayClient sends requests to one gateway.
type gatewayClient struct {
	url string // http://host:port
	hc  *http.Client
}

func newGatewayClient(url string) *gatewayClient {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64 // the in-flight cap, with room: no new connection per request
	return &gatewayClient{url: url, hc: &http.Client{Transport: tr}}
}

func (gc *gatewayClient) close() { gc.hc.CloseIdleConnections() }

// generate runs one request as a streaming completion and records how it
// ended; timeout is the soak's deadline for it.
func (gc *gatewayClient) generate(ctx context.Context, id int, req api.GenerateRequest, timeout time.Duration) reqRecord {
	rec := reqRecord{ID: id, Path: pathGateway, Sent: time.Now(), Request: req}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	st := &sseStream{logprobs: -1, usage: -1, sent: rec.Sent, now: time.Now}
	if req.Logprobs != nil {
		st.logprobs = *req.Logprobs
	}
	err := gc.stream(rctx, &req, st)
	rec.Done = time.Now()
	rec.GatewaySeed, rec.Tokens, rec.TokenMs, rec.Finish = st.seed, st.tokens, st.atMs, st.finish
	if err == nil {
		err = st.failure()
	}
	if req.Logprobs != nil {
		rec.Logprobs = hashJSON(st.lps)
		rec.TokenLogprob, rec.LogprobsMissing = st.tokenLogprobs()
	}
	rec.Stream = st.check()
	if err != nil {
		rec.Error = err.Error()
		rec.TimedOut = errors.Is(rctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil
	}
	return rec
}

// stream posts the completion and reads its answer into st.
func (gc *gatewayClient) stream(ctx context.Context, req *api.GenerateRequest, st *sseStream) error {
	body, err := json.Marshal(newCompletionBody(req))
	if err != nil {
		return err
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, gc.url+"/v1/completions", bytes.NewReader(body))
	if err != nil {
		return err
	}
	hreq.Header.Set("Content-Type", "application/json")
	resp, err := gc.hc.Do(hreq)
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	defer resp.Body.Close()
	if h := resp.Header.Get(gateway.SeedHeader); h != "" {
		s, err := strconv.ParseUint(h, 10, 64)
		if err != nil {
			return fmt.Errorf("%s %q: %w", gateway.SeedHeader, h, err)
		}
		st.seed = &s
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return fmt.Errorf("HTTP %d %s", resp.StatusCode, errorText(b))
	}
	return st.read(resp.Body)
}

// apiError is the gateway's error object, in an answer or an error event.
type apiError struct {
	Error *struct {
		Message string  `json:"message"`
		Code    *string `json:"code"`
	} `json:"error"`
}

// errorText is an error body's code and message, or the body itself.
func errorText(body []byte) string {
	var e apiError
	if json.Unmarshal(body, &e) != nil || e.Error == nil {
		return strings.TrimSpace(string(body))
	}
	if e.Error.Code != nil {
		return *e.Error.Code + ": " + e.Error.Message
	}
	return e.Error.Message
}

// waitReady polls the gateway's /ready until it answers 200.
func (gc *gatewayClient) waitReady(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		status, err := gc.get(ctx, "/ready")
		if status == http.StatusOK {
			return nil
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = fmt.Errorf("/ready answered %d", status)
			}
			return fmt.Errorf("the gateway at %s was not ready within %v: %w", gc.url, limit, err)
		}
		if err := sleepCtx(ctx, 250*time.Millisecond); err != nil {
			return err
		}
	}
}

func (gc *gatewayClient) get(ctx context.Context, path string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, gc.url+path, nil)
	if err != nil {
		return 0, err
	}
	resp, err := gc.hc.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}
