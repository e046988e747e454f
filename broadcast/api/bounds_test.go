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
