package membership

import (
	"encoding/json"
	"fmt"
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
