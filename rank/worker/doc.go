// Package worker owns the worker protocol: how an agent drives a model
// worker, the process that owns a card and runs the forward pass
// (docs/worker-protocol.md).
//
// It holds the wire format (frames; HELLO/HELLO_OK with version
// negotiation; FORWARD, FORWARD_OK, ERROR, SHUTDOWN), the shared-memory
// region through which rank 0's logits come back, and the logits dtypes;
// Executor, the agent's side, which starts or connects to a worker and
// implements rank.Executor (Start); and Serve, the worker's side, which
// answers with the synthetic model's logits (rank.Synthetic) for
// `tpcoord worker` and for tests. SplitCommand splits --worker-cmd.
//
// It does not own the decode loop, scheduling or sampling (package rank
// and sampler), half-float conversion (internal/f16), or any real model:
// a real worker is another process that speaks this protocol.
package worker
