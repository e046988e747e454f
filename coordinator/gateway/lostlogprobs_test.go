package gateway

import (
	"encoding/json"
	"slices"
	"testing"
)

// TestLostLogprobsStreamed: a seeded streaming completion whose logprobs
// reply for one token is lost (a NATS restart). The token's chunk waits
// for its logprobs; the client draws the token again with them once the
// request has finished; every token is streamed once, with its logprobs.
func TestLostLogprobsStreamed(t *testing.T) {
	g, f := newTestGateway(t, "abcd", nil)
	f.loseLogprobs = 2 // index 1's
	srv := serve(t, g)
	resp := post(t, srv, "/v1/completions", `{"prompt":[1,2],"max_tokens":4,"seed":3,"logprobs":1,"stream":true}`)
	defer resp.Body.Close()
	var tokens []int32
	for _, e := range events(t, resp) {
		var ev struct {
			Choices []struct {
				TokenIDs []int32 `json:"token_ids"`
				Logprobs *struct {
					TokenLogprobs []float64 `json:"token_logprobs"`
				} `json:"logprobs"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(e), &ev); err != nil || len(ev.Choices) == 0 {
			continue // the usage chunk, or no choice
		}
		c := ev.Choices[0]
		if len(c.TokenIDs) == 0 {
			continue
		}
		if c.Logprobs == nil || len(c.Logprobs.TokenLogprobs) != len(c.TokenIDs) {
			t.Fatalf("chunk %s: tokens without their logprobs", e)
		}
		for i, lp := range c.Logprobs.TokenLogprobs {
			if lp != -1 { // the fake's logprob; 0 where none came
				t.Fatalf("chunk %s: token %d streamed without its logprobs", e, c.TokenIDs[i])
			}
		}
		tokens = append(tokens, c.TokenIDs...)
	}
	if want := []int32{'a', 'b', 'c', 'd'}; !slices.Equal(tokens, want) {
		t.Fatalf("streamed tokens %v, want %v", tokens, want)
	}
	reqs := f.requests()
	if len(reqs) != 2 || !slices.Equal(reqs[1].ResumeTokenIDs, []int32{'a'}) {
		t.Fatalf("%d submissions, the second from %v: want it drawn again after the token whose logprobs came", len(reqs), reqs[len(reqs)-1].ResumeTokenIDs)
	}
}
