package gateway

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"
)

// TestTextOffsetIsIntoTheText: text_offset is where each token's text
// begins in the returned text, in code points, as OpenAI's: a token whose
// text is empty (here 0xC3, the first byte of é, which the next token
// completes) does not advance it, a stream's chunks continue the offsets
// of the ones before, and tokens after a stop string point at the text's
// end.
func TestTextOffsetIsIntoTheText(t *testing.T) {
	g, _ := newTestGateway(t, "héllo wörld", nil, WithTokenizer(byteTokenizer{}))
	srv := serve(t, g)
	// h é(2 bytes) l l o ␠ w ö(2 bytes) r l d
	want := []int{0, 1, 1, 2, 3, 4, 5, 6, 7, 7, 8, 9, 10}

	resp := post(t, srv, "/v1/completions", `{"model":"m","prompt":"x","max_tokens":13,"logprobs":0}`)
	body := decode[completionResponse](t, resp)
	c := body.Choices[0]
	if c.Text != "héllo wörld" || !slices.Equal(c.Logprobs.TextOffset, want) {
		t.Errorf("text %q, text_offset %v; want %v", c.Text, c.Logprobs.TextOffset, want)
	}

	// Streamed: each chunk's offsets continue the text sent before it.
	resp = post(t, srv, "/v1/completions", `{"model":"m","prompt":"x","max_tokens":13,"logprobs":0,"stream":true}`)
	var got []int
	text := ""
	for _, ev := range events(t, resp) {
		var ch completionResponse
		if err := json.Unmarshal([]byte(ev), &ch); err != nil {
			t.Fatal(err)
		}
		for _, c := range ch.Choices {
			text += c.Text
			if c.Logprobs != nil {
				got = append(got, c.Logprobs.TextOffset...)
			}
		}
	}
	if text != "héllo wörld" || !slices.Equal(got, want) {
		t.Errorf("stream: text %q, text_offset %v; want %v", text, got, want)
	}

	// A stop string cuts the text: the tokens up to it are answered, the
	// last ones at the text's end.
	resp = post(t, srv, "/v1/completions", `{"model":"m","prompt":"x","max_tokens":13,"logprobs":0,"stop":"lo"}`)
	body = decode[completionResponse](t, resp)
	c = body.Choices[0]
	if resp.StatusCode != http.StatusOK || c.Text != "hél" || !slices.Equal(c.Logprobs.TextOffset, []int{0, 1, 1, 2, 3, 3}) {
		t.Errorf("stop: %d text %q, text_offset %v; want hél and [0 1 1 2 3 3]", resp.StatusCode, c.Text, c.Logprobs.TextOffset)
	}
}
