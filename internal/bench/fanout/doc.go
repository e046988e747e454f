// Package fanout is `tpcoord bench broadcast`: publish-to-receive latency
// of a step's fan-out from one publisher process to N follower processes,
// through NATS set up as launch sets up a job, and through a raw TCP
// fan-out (the floor), in the same run. Run drives a benchmark from the
// process that reports; RunPublisher, RunServer and RunFollower are the
// processes it starts (from Options.Self, as hidden tpcoord subcommands).
// Floor is the TCP case alone, for bench step.
//
// It is named after what it measures rather than after its command so
// that it does not shadow the broadcast package it uses.
package fanout
