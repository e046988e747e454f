package noisepool

import (
	"encoding/binary"
	"fmt"
	"io"
)

// Domain separators, so that a seed and a (base, sequence) pair never give
// the same key by construction (only by a 2^-64 accident).
const (
	seededDomain   = 0x5eed5eed5eed5eed
	sequenceDomain = 0x5e90e7ce5e90e7ce
)

// StreamKey returns a request's noise stream key. A request with a seed gets
// a key from the seed alone, so the same seed gives the same noise rows and
// the same tokens on any agent, in any batch. A request without one gets a
// key from the agent's random base (see NewBase) and its sequence id, so
// concurrent requests never share noise.
func StreamKey(seed *uint64, base, seq uint64) uint64 {
	if seed != nil {
		return mix64(*seed ^ seededDomain)
	}
	return mix64(mix64(base^sequenceDomain) + seq*golden)
}

// NewBase reads a per-agent random base for StreamKey from r (crypto/rand's
// Reader in production, a fixed source in tests).
func NewBase(r io.Reader) (uint64, error) {
	var b [8]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return 0, fmt.Errorf("noisepool: reading random stream base: %w", err)
	}
	return binary.LittleEndian.Uint64(b[:]), nil
}
