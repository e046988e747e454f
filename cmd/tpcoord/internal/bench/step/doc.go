// Package step is `tpcoord bench step`: the coordinator's overhead per
// decode step of a real local cluster (`tpcoord launch` with a zero-cost
// forward, started from Options.Self), read from rank 0's flight
// recorder, against the raw TCP fan-out floor (fanout.Floor) to as many
// follower processes, in the same run.
package step
