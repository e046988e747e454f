// Package rank owns the decode loop of one TP rank.
//
// The decisions are made by single-threaded values that do no I/O and take
// time as an argument: Mirror applies steps in order and keeps the rolling
// digest (every rank); Scheduler admits requests, builds steps and applies
// stop conditions (rank 0); peerTable judges, from the peers' heartbeats,
// which rank is silent too long (liveness), which follower rank 0 must wait
// for (flow control) and which one diverged (digests). Driver is the I/O
// loop around them: it moves messages between a broadcast.Transport, the
// Executor and the sampler, reads the clock (DriverConfig.Clock), and acts
// on what they decide. Hold answers for a rank while the world re-forms.
//
// The Executor interface and Synthetic, a deterministic load generator
// with realistic logits, live here; the model-worker executor and its
// protocol are in the worker package below, and the requester's side of
// the request API in client.
package rank
