package gateway

import (
	"context"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tpcoord/tpcoord/broadcast/api"
)

// choice is one NATS request of an HTTP request and what came back: its
// tokens, its text (with stop strings applied), and what is not yet sent
// to a streaming client. Its callbacks run on its own goroutine only.
type choice struct {
	index  int
	req    api.GenerateRequest
	stops  []string
	hold   int         // bytes held back: the longest stop string - 1
	detok  Detokenizer // nil: no text
	cancel context.CancelFunc

	tokens   []int32
	logprobs []api.Logprobs
	lpDone   int             // tokens [0, lpDone) have their logprobs
	text     strings.Builder // released text
	pending  string          // decoded, not yet released (may begin a stop string)
	stopped  bool            // a stop string matched: the text ends there
	sentTok  int             // tokens already streamed
	sentText int             // bytes of text already streamed
	// offsets[i] is where token i's text begins in the choice's text, in
	// Unicode code points (logprobs' text_offset): the text the tokens
	// before it completed. decoded counts the code points decoded so far,
	// released those moved to text.
	offsets           []int
	decoded, released int

	rep   *api.GenerateReply
	err   error
	start time.Time
	first time.Time // first token
	last  time.Time // latest token
	itl   []time.Duration
}

func newChoice(index int, req api.GenerateRequest, stops []string, detok Detokenizer) *choice {
	c := &choice{index: index, req: req, stops: stops, detok: detok}
	for _, s := range stops {
		c.hold = max(c.hold, len(s)-1)
	}
	return c
}

// onToken takes the token at index; it reports whether the text reached
// a stop string (the caller then cancels the request).
func (c *choice) onToken(now time.Time, tok int32) (stop bool) {
	if c.first.IsZero() {
		c.first = now
	} else {
		c.itl = append(c.itl, now.Sub(c.last))
	}
	c.last = now
	if c.stopped {
		return false // tokens in flight after the stop: not part of the answer
	}
	c.tokens = append(c.tokens, tok)
	c.offsets = append(c.offsets, c.decoded)
	if c.detok == nil {
		return false
	}
	// A token the tokenizer does not know (its vocabulary smaller than the
	// job's; /ready says so) adds no text; its ID is still answered.
	piece, _ := c.detok.Add(tok)
	c.pending += piece
	c.decoded += utf8.RuneCountInString(piece)
	return c.release(false)
}

// release moves pending text to the released text up to a stop string
// (then stopping) or, while the request runs, up to the bytes that could
// still begin one.
func (c *choice) release(final bool) (stop bool) {
	for _, s := range c.stops {
		if i := strings.Index(c.pending, s); i >= 0 {
			c.write(c.pending[:i])
			c.pending, c.stopped = "", true
			return true
		}
	}
	n := len(c.pending)
	if !final {
		n -= c.hold
		for n > 0 && n < len(c.pending) && !utf8.RuneStart(c.pending[n]) {
			n-- // never cut a character
		}
	}
	if n > 0 {
		c.write(c.pending[:n])
		c.pending = c.pending[n:]
	}
	return false
}

// write releases s: it joins the choice's text.
func (c *choice) write(s string) {
	c.text.WriteString(s)
	c.released += utf8.RuneCountInString(s)
}

// textOffset is token i's text_offset: where its text begins in the
// choice's text, in code points. A token whose text is empty (a special
// token, or the first bytes of a character the next token completes) has
// the offset of the text that follows it; one whose text a stop string
// cut off has the text's length.
func (c *choice) textOffset(i int) int {
	return min(c.offsets[i], c.released+utf8.RuneCountInString(c.pending))
}

// finish flushes the detokenizer once the request ended.
func (c *choice) finish() {
	if c.detok != nil && !c.stopped {
		rest := c.detok.Flush()
		c.pending += rest
		c.decoded += utf8.RuneCountInString(rest)
		c.release(true)
	}
}

// finishReason is OpenAI's: a stop string or token ends with "stop".
func (c *choice) finishReason() string {
	switch {
	case c.stopped:
		return api.FinishStop
	case c.rep == nil:
		return api.FinishError
	}
	return c.rep.FinishReason
}

// unsent returns the tokens and text not yet streamed, and marks them sent.
// With logprobs a token waits for its own (they come in a reply after it)
// until the end: one whose reply was lost in a fault is then drawn again
// with them (rank/client), and its chunk carries them.
func (c *choice) unsent(final, logprobs bool) (tokens []int32, text string, from int) {
	from = c.sentTok
	upto := len(c.tokens)
	if logprobs && !final {
		upto = max(min(upto, c.lpDone), c.sentTok)
	}
	tokens = c.tokens[c.sentTok:upto]
	c.sentTok = upto
	all := c.text.String()
	text = all[c.sentText:]
	c.sentText = len(all)
	return tokens, text, from
}

// onLogprobs keeps the logprobs of the token at index.
func (c *choice) onLogprobs(index int, lp *api.Logprobs) {
	if index < 0 || index >= len(c.tokens) {
		return // after a stop string, or out of order: not part of the answer
	}
	for len(c.logprobs) <= index {
		c.logprobs = append(c.logprobs, api.Logprobs{Token: -1})
	}
	c.logprobs[index] = *lp
	for c.lpDone < len(c.logprobs) && c.logprobs[c.lpDone].Token >= 0 {
		c.lpDone++
	}
}
