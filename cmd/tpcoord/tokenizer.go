//go:build !agentonly

package main

import (
	"github.com/tpcoord/tpcoord/coordinator/agent"
	"github.com/tpcoord/tpcoord/coordinator/gateway"
	"github.com/tpcoord/tpcoord/coordinator/gateway/tokenizer"
)

// vocabLoader reads the agent's --tokenizer for rank 0's grammars.
var vocabLoader agent.VocabLoader = func(spec string) ([][]byte, []bool, error) {
	t, err := tokenizer.Load(spec)
	if err != nil {
		return nil, nil, err
	}
	pieces, special := t.Pieces()
	return pieces, special, nil
}

// loadTokenizer loads --tokenizer's spec for the gateway.
func loadTokenizer(spec string) (gateway.Tokenizer, error) {
	t, err := tokenizer.Load(spec)
	if err != nil {
		return nil, err
	}
	return gateway.FromTokenizer(t), nil
}
