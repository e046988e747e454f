package api_test

import (
	"testing"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/broadcast/api"
)

// A request the API accepts must fit a step message: a resumed request is
// admitted with its prompt and output together.
func TestSequenceBoundFitsStep(t *testing.T) {
	if api.MaxSequenceTokens != broadcast.MaxPromptLen {
		t.Fatalf("api.MaxSequenceTokens %d, broadcast.MaxPromptLen %d", api.MaxSequenceTokens, broadcast.MaxPromptLen)
	}
	if api.MaxPromptTokens > api.MaxSequenceTokens {
		t.Fatalf("MaxPromptTokens %d > MaxSequenceTokens %d", api.MaxPromptTokens, api.MaxSequenceTokens)
	}
}

// Finding 1 of the outside testing: logit_bias is bounded (64 choices of
// 30,000 entries kept rank 0 from its heartbeats), and the refusal names
// the field and both numbers.
func TestLogitBiasBounded(t *testing.T) {
	p := api.DefaultParams()
	p.LogitBias = map[int32]float32{}
	for i := range api.MaxLogitBias {
		p.LogitBias[int32(i)] = -1
	}
	if err := p.Validate(100352); err != nil {
		t.Fatalf("%d entries: %v", api.MaxLogitBias, err)
	}
	p.LogitBias[api.MaxLogitBias] = -1
	err := p.Validate(100352)
	if err == nil || err.Error() != "logit_bias: has 1025 entries, at most 1024" {
		t.Fatalf("1025 entries: %v, want the field and both numbers", err)
	}
}

// Finding 1: the other per-row lists are bounded too, refused naming the
// field and both numbers.
func TestTokenListsBounded(t *testing.T) {
	const vocab = 2000
	p := api.DefaultParams()
	p.StopTokenIDs = make([]int32, api.MaxStopTokenIDs)
	p.AllowedTokenIDs = make([]int32, vocab)
	if err := p.Validate(vocab); err != nil {
		t.Fatalf("at the bounds: %v", err)
	}
	p.StopTokenIDs = append(p.StopTokenIDs, 1)
	if err := p.Validate(vocab); err == nil || err.Error() != "stop_token_ids: has 1025 entries, at most 1024" {
		t.Fatalf("1025 stop tokens: %v", err)
	}
	p.StopTokenIDs = nil
	p.AllowedTokenIDs = append(p.AllowedTokenIDs, 1)
	if err := p.Validate(vocab); err == nil || err.Error() != "allowed_token_ids: has 2001 entries, more than the vocabulary's 2000 tokens" {
		t.Fatalf("2001 allowed tokens: %v", err)
	}
}
