package rank

import "time"

// reqState is the driver's own state of a request (Request.Ext): its
// timings and its tracing, carried with it across epochs.
type reqState struct {
	times requestTimes
	trace requestTrace
}

// requestTimes are the moments rank 0's driver times a request by: it
// arrived (read off the bus), was first scheduled into a step's batch,
// and its first and last tokens were sampled.
type requestTimes struct{ received, scheduled, first, last time.Time }

// state returns r's driver state, adding an empty one to a request made
// without it (by a test, or resumed from a hold).
func state(r *Request) *reqState {
	s, ok := r.Ext.(*reqState)
	if !ok {
		s = &reqState{}
		r.Ext = s
	}
	return s
}
