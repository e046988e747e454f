package gateway

import (
	"fmt"
	"net/http"
	"time"

	"github.com/tpcoord/tpcoord/broadcast/api"
)

// The answer of /v1/completions, as OpenAI shapes it, with vLLM's
// token_ids on every choice. (openai-go's response types are made for
// decoding: they have no token_ids and cannot write a null logprobs; the
// tests decode these with them.)
type completionResponse struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []completionChoice `json:"choices"`
	Usage   *usage             `json:"usage,omitempty"`
}

type completionChoice struct {
	Index        int                 `json:"index"`
	Text         string              `json:"text"`
	Logprobs     *completionLogprobs `json:"logprobs"`
	FinishReason *string             `json:"finish_reason"`
	TokenIDs     []int32             `json:"token_ids"`
}

// completionLogprobs is the legacy completions' logprobs object.
type completionLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []float64            `json:"token_logprobs"`
	TopLogprobs   []map[string]float64 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

type completionFormat struct {
	g       *Gateway
	id      string
	created int64
	logprob bool
}

func (f *completionFormat) envelope(choices []completionChoice) *completionResponse {
	return &completionResponse{ID: f.id, Object: "text_completion", Created: f.created, Model: f.g.cfg.Model, Choices: choices}
}

func (f *completionFormat) chunk(c *choice, tokens []int32, text string, from int, final bool) any {
	ch := completionChoice{Index: c.index, Text: text, TokenIDs: tokens}
	if final {
		r := c.finishReason()
		ch.FinishReason = &r
	}
	if f.logprob && len(tokens) > 0 {
		ch.Logprobs = f.g.completionLogprobs(c, from, len(tokens))
	}
	return f.envelope([]completionChoice{ch})
}

func (f *completionFormat) response(choices []*choice, u usage) any {
	out := make([]completionChoice, len(choices))
	for i, c := range choices {
		r := c.finishReason()
		out[i] = completionChoice{Index: c.index, Text: c.text.String(), TokenIDs: nonNil(c.tokens), FinishReason: &r}
		if f.logprob {
			out[i].Logprobs = f.g.completionLogprobs(c, 0, len(c.tokens))
		}
	}
	resp := f.envelope(out)
	resp.Usage = &u
	return resp
}

func (f *completionFormat) opening(*choice) any { return nil }

func (f *completionFormat) usageChunk(u usage) any {
	resp := f.envelope([]completionChoice{})
	resp.Usage = &u
	return resp
}

// completionLogprobs builds the logprobs of tokens [from, from+n) of c.
// text_offset is OpenAI's: where each token's text begins in the choice's
// text, in code points (choice.textOffset).
func (g *Gateway) completionLogprobs(c *choice, from, n int) *completionLogprobs {
	lp := &completionLogprobs{}
	for i := from; i < from+n; i++ {
		var l api.Logprobs
		if i < len(c.logprobs) {
			l = c.logprobs[i]
		}
		s := g.tokenText(c.tokens[i])
		lp.Tokens = append(lp.Tokens, s)
		lp.TokenLogprobs = append(lp.TokenLogprobs, float64(l.Logprob))
		top := make(map[string]float64, len(l.Top))
		for _, t := range l.Top {
			top[g.tokenText(t.Token)] = float64(t.Logprob)
		}
		lp.TopLogprobs = append(lp.TopLogprobs, top)
		lp.TextOffset = append(lp.TextOffset, c.textOffset(i))
	}
	return lp
}

// tokenText is one token as logprobs name it: its text, or vLLM's
// "token_id:N" without a tokenizer.
func (g *Gateway) tokenText(id int32) string {
	if g.tok != nil {
		if s, err := g.tok.Decode([]int32{id}); err == nil {
			return s
		}
	}
	return fmt.Sprintf("token_id:%d", id)
}

func nonNil(t []int32) []int32 {
	if t == nil {
		return []int32{}
	}
	return t
}

func (g *Gateway) handleCompletions(w http.ResponseWriter, r *http.Request) {
	handle(g, w, r, g.completionPlan, func(pl *plan) format {
		return &completionFormat{g: g, id: "cmpl-" + newID(), created: time.Now().Unix(), logprob: pl.logprobs != nil}
	})
}
