// Package e2e is `tpcoord bench e2e`: the output tokens/s of a real local
// cluster (`tpcoord launch`, started from Options.Self) for each
// combination of the three sampling optimisations (noise pool, log-space
// sampling, sampling on rank 0 only), and each one's own contribution. The
// cluster runs the synthetic executor, or a real model worker (Executor
// "worker", Model), whose lines then carry rank 0's step breakdown in
// place of a forward time.
package e2e
