package rank

import "github.com/tpcoord/tpcoord/rank/core"

// The decode loop's rows and requests are package core's; executors and
// pickers know them by these names.
type (
	// Seq is one sequence in the batch as every rank mirrors it.
	Seq = core.Seq
	// Request is one generation request as rank 0 tracks it.
	Request = core.Request
	// Event is what a requester must hear after a step.
	Event = core.Event
)

// NoToken stands in a step's token list for a row that produced no token.
const NoToken = core.NoToken
