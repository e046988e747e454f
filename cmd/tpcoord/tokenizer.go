//go:build !agentonly

package main

import (
	"github.com/tpcoord/tpcoord/coordinator/gateway"
	"github.com/tpcoord/tpcoord/coordinator/gateway/tokenizer"
)

// loadTokenizer loads --tokenizer's spec for the gateway.
func loadTokenizer(spec string) (gateway.Tokenizer, error) {
	t, err := tokenizer.Load(spec)
	if err != nil {
		return nil, err
	}
	return gateway.FromTokenizer(t), nil
}
