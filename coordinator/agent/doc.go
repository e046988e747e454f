// Package agent is one TP rank's agent as a library: Config (with
// DefaultConfig, the one place its defaults live, and Validate, whose errors
// name fields), New, which checks the configuration and does no I/O, and
// Run, which owns the agent's whole life: telemetry, the bus, membership and
// the rendezvous, the noise pool, and the decode loop across epochs (under
// OnPeerLossWait it holds rank 0's requests while the world re-forms, and
// a follower follows rank 0 into a later epoch). Status and DumpFlight may be
// called from any goroutine while it runs.
//
// Options inject what a test or an embedding program provides instead of
// the defaults: the bus (broadcast.Hub in tests), memberlist's transport
// (membership.Network), the executor and a readiness notifier. Everything
// Run starts is owned by one lifecycle.Group and stopped before Run returns.
//
// The agent does not parse flags, handle signals or choose exit codes:
// cmd/tpcoord maps flags to Config, signals to Run's context, and Run's
// errors (rank.ErrPeerLost, rank.ErrAborted, membership.ErrRankTaken,
// *fielderr.Error) to exit codes.
package agent
