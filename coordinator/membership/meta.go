package membership

import (
	"encoding/json"
	"fmt"
	"sync"
)

// MetaLimit is memberlist's bound on node metadata.
const MetaLimit = 512

// Meta is what every member advertises about itself.
type Meta struct {
	Job     string `json:"job"`
	Rank    int    `json:"rank"`
	World   int    `json:"world"`
	Digest  string `json:"digest"`  // config digest: members must agree
	NATS    string `json:"nats"`    // NATS URL the agent uses (credentials removed)
	Version string `json:"version"` // tpcoord version
	Proto   int    `json:"proto"`   // wire protocol version
	Started int64  `json:"started"` // unix ns; the older claimant of a rank keeps it
	// Leader is rank 0's publisher ID, stamped on every step it publishes;
	// followers accept steps with this ID only. Zero on other ranks.
	Leader uint32 `json:"leader,omitempty"`
	// Epoch is rank 0's current epoch: it grows each time the world
	// re-forms after a loss, and followers run the epoch rank 0 advertises.
	Epoch uint32 `json:"epoch,omitempty"`
	// MasterPort is where rank 0's model runtime listens for its peers'
	// collectives rendezvous in the current epoch (torchrun's MASTER_PORT;
	// MASTER_ADDR is rank 0's address). Zero when the executor needs none.
	MasterPort int `json:"master_port,omitempty"`
	// State is MetaLeaving once the member has begun a graceful Leave. It
	// is how peers tell a departure from a failure: memberlist v0.7 hands
	// NotifyLeave a Node whose State field is never set.
	State string `json:"state,omitempty"`
}

// MetaLeaving is Meta.State of a member that is leaving on purpose.
const MetaLeaving = "leaving"

func (m Meta) encode() ([]byte, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	if len(b) > MetaLimit {
		return nil, fmt.Errorf("member metadata is %d bytes, memberlist allows %d (shorten the job ID or NATS URL)", len(b), MetaLimit)
	}
	return b, nil
}

func decodeMeta(b []byte) (Meta, error) {
	var m Meta
	if len(b) == 0 {
		return m, fmt.Errorf("no metadata")
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("metadata is not tpcoord's: %w", err)
	}
	return m, nil
}

// metaCache remembers the metadata it has decoded, by its bytes.
// memberlist hands the alive delegate every alive message it receives,
// most of them repeats of the same member's gossip (a 64-rank start
// delivers each member's alive to each rank several times), and a JSON
// decode for each took 3% of a 64-rank start's samples. The cache holds at
// most maxEntries metadata of at most MetaLimit bytes each (memberlist does
// not bound what peers send); past that it starts over. Metadata that does
// not decode, or is longer, is not cached: it is decoded again each time.
type metaCache struct {
	mu         sync.Mutex
	maxEntries int
	byBytes    map[string]Meta
}

func newMetaCache(maxEntries int) *metaCache {
	return &metaCache{maxEntries: maxEntries, byBytes: map[string]Meta{}}
}

// decode is decodeMeta(b), from the cache when b was decoded before.
func (mc *metaCache) decode(b []byte) (Meta, error) {
	mc.mu.Lock()
	m, ok := mc.byBytes[string(b)]
	mc.mu.Unlock()
	if ok {
		return m, nil
	}
	m, err := decodeMeta(b)
	if err != nil || len(b) > MetaLimit {
		return m, err
	}
	mc.mu.Lock()
	if len(mc.byBytes) >= mc.maxEntries {
		clear(mc.byBytes)
	}
	mc.byBytes[string(b)] = m
	mc.mu.Unlock()
	return m, nil
}

// metaCacheSize bounds a member's metaCache: each peer's metadata changes
// a few times in a job's life (epochs, leaving), so four versions a rank,
// plus some room for members of other jobs that get refused.
func metaCacheSize(world int) int {
	return 4*max(world, 1) + 16
}
