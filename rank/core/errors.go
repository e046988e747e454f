package core

import (
	"errors"
	"time"
)

// Errors that end a decode loop. The agent maps them to exit codes.
var (
	// ErrAborted: lockstep could not be kept (gap, divergence, protocol
	// error, abort from rank 0).
	ErrAborted = errors.New("aborted")
	// ErrPeerLost: another rank died or left.
	ErrPeerLost = errors.New("peer lost")
)

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
