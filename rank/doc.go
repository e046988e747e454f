// Package rank owns the decode loop of one TP rank.
//
// The logic is pure and single-threaded: Mirror applies steps in order and
// keeps the rolling digest (every rank), Scheduler admits requests, builds
// steps and applies stop conditions (rank 0). Driver is the thin I/O loop
// around them: it moves messages between a broadcast.Transport, the
// Executor and the sampler, and owns no decisions of its own.
//
// The Executor interface is the model side; Synthetic, a deterministic load
// generator with realistic logits, is defined here. The executor backed by
// a model worker process, and its protocol, are package rank/worker.
package rank
