package serve

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/rank/client"
)

// Path names, as the result lines carry them.
const (
	PathHTTP = "http"
	PathNATS = "nats"
)

// natsSender sends requests straight to rank 0 through a rank/client.Mux,
// as the gateway does: one reply subscription for all of them, so that
// neither path pays a subscription round trip per request.
type natsSender struct {
	mux  *client.Mux
	subj broadcast.Subjects
}

func (*natsSender) name() string { return PathNATS }

func (s *natsSender) send(ctx context.Context, r request, onTokens func(int)) error {
	p := api.DefaultParams()
	seed := r.seed
	p.Temperature, p.IgnoreEOS, p.Seed = temperature, true, &seed
	req := &api.GenerateRequest{PromptTokenIDs: r.prompt, MaxTokens: r.maxTokens, Params: p}
	_, err := s.mux.Stream(ctx, s.subj, req, client.Callbacks{Token: func(int, int32) { onTokens(1) }})
	return err
}

// httpSender streams /v1/completions from the gateway with a plain
// net/http client and a minimal SSE reader: it decodes only the token IDs
// of each event, so the client's own CPU, on the machine the job and the
// gateway share, stays small next to the gateway's.
type httpSender struct {
	client *http.Client
	url    string // the API's base URL, ending in /v1
	model  string
}

// newHTTPSender keeps one connection per client open between requests.
func newHTTPSender(url, model string, clients int) *httpSender {
	tr := &http.Transport{MaxIdleConnsPerHost: clients, DisableCompression: true}
	return &httpSender{client: &http.Client{Transport: tr}, url: url, model: model}
}

func (*httpSender) name() string { return PathHTTP }

// completionBody is the request body: token-ID prompt, streaming.
type completionBody struct {
	Model       string  `json:"model"`
	Prompt      []int32 `json:"prompt"`
	MaxTokens   int     `json:"max_tokens"`
	Temperature float32 `json:"temperature"`
	Seed        uint64  `json:"seed"`
	IgnoreEOS   bool    `json:"ignore_eos"`
	Stream      bool    `json:"stream"`
}

// completionJSON is request r's body for model.
func completionJSON(model string, r request) ([]byte, error) {
	return json.Marshal(completionBody{Model: model, Prompt: r.prompt, MaxTokens: r.maxTokens,
		Temperature: temperature, Seed: r.seed, IgnoreEOS: true, Stream: true})
}

func (s *httpSender) send(ctx context.Context, r request, onTokens func(int)) error {
	body, err := completionJSON(s.model, r)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url+"/completions", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(msg))
	}
	if err := readSSE(resp.Body, onTokens); err != nil {
		return err
	}
	// Read to the end of the body (the chunked encoding's last chunk,
	// which follows [DONE]), so the connection is kept for the next
	// request rather than closed and dialled again.
	_, err = io.Copy(io.Discard, io.LimitReader(resp.Body, maxEventBytes))
	return err
}

// sseEvent is what readSSE decodes of an event: the token IDs of each
// choice, or an error.
type sseEvent struct {
	Choices []struct {
		TokenIDs []int32 `json:"token_ids"`
	} `json:"choices"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// maxEventBytes bounds one event line; the bench's events hold a token or
// a few.
const maxEventBytes = 64 << 10

// readSSE reads a completions stream up to its "data: [DONE]", calling
// onTokens with the token count of each event that has tokens. An error
// event, a malformed one, or a stream cut before [DONE] is an error.
func readSSE(r io.Reader, onTokens func(int)) error {
	br := bufio.NewReaderSize(r, maxEventBytes)
	for {
		line, err := br.ReadSlice('\n')
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			return fmt.Errorf("an event line is longer than %d bytes", maxEventBytes)
		case errors.Is(err, io.EOF):
			return errors.New("the stream ended before data: [DONE]")
		case err != nil:
			return err
		}
		data, ok := bytes.CutPrefix(line, []byte("data: "))
		if !ok {
			continue // the blank line ending an event, or a comment
		}
		data = bytes.TrimSpace(data)
		if string(data) == "[DONE]" {
			return nil
		}
		var ev sseEvent
		if err := json.Unmarshal(data, &ev); err != nil {
			return fmt.Errorf("event %.200q: %w", data, err)
		}
		if ev.Error != nil {
			return fmt.Errorf("error event: %s", ev.Error.Message)
		}
		n := 0
		for _, c := range ev.Choices {
			n += len(c.TokenIDs)
		}
		if n > 0 {
			onTokens(n)
		}
	}
}
