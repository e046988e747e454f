package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
)

// completionChunk is one streamed event of /v1/completions: a choice's
// tokens (and their logprobs, and the finish on its last), the usage, or
// an error.
type completionChunk struct {
	apiError
	Choices []struct {
		TokenIDs     []int32 `json:"token_ids"`
		FinishReason *string `json:"finish_reason"`
		Logprobs     *struct {
			TokenLogprobs []float64            `json:"token_logprobs"`
			TopLogprobs   []map[string]float64 `json:"top_logprobs"`
		} `json:"logprobs"`
	} `json:"choices"`
	Usage *struct {
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
}

// chunkLogprob is one token's logprobs as the chunks carry them: its own,
// and the top ones by token name.
type chunkLogprob struct {
	Logprob float64            `json:"logprob"`
	Top     map[string]float64 `json:"top"`
}

// sseStream is what a streamed completion brought, read event by event.
type sseStream struct {
	logprobs int // top logprobs asked for; -1: none
	sent     time.Time
	now      func() time.Time

	seed   *uint64 // the Tpcoord-Seed header
	tokens []int32 // in arrival order
	atMs   []float64
	lps    []chunkLogprob
	finish string
	usage  int    // the usage chunk's completion_tokens; -1: none came
	errEv  string // an error event's code and message
	done   bool   // [DONE] came
}

// read reads the events up to [DONE]; an error: the stream broke.
func (st *sseStream) read(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			st.done = true
			return nil
		}
		if err := st.event([]byte(data)); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("stream broken after %d tokens without [DONE]: %w", len(st.tokens), err)
	}
	return fmt.Errorf("stream ended after %d tokens without [DONE]", len(st.tokens))
}

// event takes one data event: its tokens arrive now.
func (st *sseStream) event(data []byte) error {
	var c completionChunk
	if err := json.Unmarshal(data, &c); err != nil {
		return fmt.Errorf("undecodable event %.200q: %w", data, err)
	}
	if c.Error != nil {
		st.errEv = errorText(data)
		return nil
	}
	if c.Usage != nil {
		st.usage = c.Usage.CompletionTokens
	}
	at := -1.0 // the tokens' arrival, read once: now
	for _, ch := range c.Choices {
		for i, t := range ch.TokenIDs {
			if at < 0 {
				at = roundMs(msSince(st.sent, st.now()))
			}
			st.tokens, st.atMs = append(st.tokens, t), append(st.atMs, at)
			if st.logprobs >= 0 {
				var lp chunkLogprob
				if l := ch.Logprobs; l != nil && i < len(l.TokenLogprobs) && i < len(l.TopLogprobs) {
					lp = chunkLogprob{Logprob: l.TokenLogprobs[i], Top: l.TopLogprobs[i]}
				}
				st.lps = append(st.lps, lp)
			}
		}
		if ch.FinishReason != nil {
			st.finish = *ch.FinishReason
		}
	}
	return nil
}

// failure is why a stream that reached [DONE] did not finish normally: an
// error event, or a missing finish or usage.
func (st *sseStream) failure() error {
	switch {
	case st.errEv != "":
		return fmt.Errorf("error event: %s", st.errEv)
	case st.finish == "":
		return fmt.Errorf("no finish_reason before [DONE]")
	case st.usage < 0:
		return fmt.Errorf("no usage chunk before [DONE]")
	}
	return nil
}

// check compares the streamed tokens with the usage's count: the chunks
// carry no index, so a gap shows as fewer tokens, a repeat as more.
func (st *sseStream) check() streamCheck {
	c := streamCheck{Streamed: len(st.tokens)}
	if st.usage >= 0 {
		c.Missing = max(0, st.usage-len(st.tokens))
		c.Duplicates = max(0, len(st.tokens)-st.usage)
	}
	return c
}

// tokenLogprobs is each token's own logprob, nil where its logprobs never
// came: the gateway then sends a token with no top logprobs (and logprob
// 0), which it never does for a token whose logprobs it has, when some
// were asked for. With none asked for (logprobs 0) a missing one cannot be
// told from a logprob of 0.
func (st *sseStream) tokenLogprobs() (out []*float32, missing int) {
	out = make([]*float32, len(st.lps))
	for i, lp := range st.lps {
		if len(lp.Top) < st.logprobs {
			missing++
			continue
		}
		v := float32(lp.Logprob)
		out[i] = &v
	}
	return out, missing
}

// roundMs keeps arrival times to 10 µs: requests.jsonl stays readable.
func roundMs(ms float64) float64 { return float64(int64(ms*100+0.5)) / 100 }
