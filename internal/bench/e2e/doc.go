// Package e2e is `tpcoord bench e2e`: the output tokens/s of a real local
// cluster (`tpcoord launch`, started from Options.Self) for each
// combination of the three sampling optimisations (noise pool, log-space
// sampling, sampling on rank 0 only), and each one's own contribution.
package e2e
