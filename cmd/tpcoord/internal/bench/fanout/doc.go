// Package fanout is `tpcoord bench broadcast`: publish-to-receive latency
// of a step's fan-out from one publisher process to N follower processes,
// through NATS set up as launch sets up a job, through a raw TCP fan-out
// (the floor) and through torch.distributed's gloo broadcast (the path a
// plain PyTorch TP loop ships its tokens on), in the same run. Run drives a
// benchmark from the process that reports; RunPublisher, RunServer and
// RunFollower are the processes it starts for tcp and nats (from
// Options.Self, as hidden tpcoord subcommands), gloo_broadcast.py, embedded,
// those of gloo (under Options.Python, which ResolveGloo finds).
// Floor is the TCP case alone, for bench step.
//
// It is named after what it measures rather than after its command so
// that it does not shadow the broadcast package it uses.
package fanout
