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
