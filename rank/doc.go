// Package rank owns the decode loop of one TP rank.
//
// The decisions are made in package core, by single-threaded values that
// do no I/O and take time as an argument: core.Mirror applies steps in
// order and keeps the rolling digest (every rank); core.Leader decides rank
// 0's step boundaries (submissions, cancels, client timeouts, the step,
// what each requester hears) over core.Scheduler; core.Peers judges, from
// the peers' heartbeats, which rank is silent too long (liveness), which
// follower rank 0 must wait for (flow control) and which one diverged
// (digests). Driver is the I/O loop around them: it moves messages between
// a broadcast.Transport, the Executor and the sampler, reads the clock
// (DriverConfig.Clock), feeds the core and does what it returns. Hold
// answers for a rank while the world re-forms.
//
// The Executor interface and Synthetic, a deterministic load generator
// with realistic logits, live here; the model-worker executor and its
// protocol are in the worker package below, and the requester's side of
// the request API in client.
package rank
