package api

// Control is a message on tpc.<job>.control: rank 0 (or a supervisor
// such as launch, which reports ranks it saw die) tells every rank to stop.
type Control struct {
	Kind   string `json:"kind"` // ControlAbort or ControlPeerLost
	Reason string `json:"reason,omitempty"`
	From   string `json:"from,omitempty"` // empty: rank 0
}

// Control kinds.
const (
	ControlAbort    = "abort"     // rank 0 aborts the epoch
	ControlPeerLost = "peer_lost" // a rank was lost (Reason names it)
)
