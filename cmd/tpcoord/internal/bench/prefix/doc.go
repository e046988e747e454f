// Package prefix is `tpcoord bench prefix`: what rank 0's prefix cache
// saves. It starts one job with prefix caching (launch's default) and one
// without (--enable-prefix-caching=false) per round, alternating which
// goes first, and runs the same two workloads on each: requests sharing a
// long prefix sent one after another (TTFT of the first, cold, request
// against the rest), and concurrent multi-turn chats that resend their
// whole history (the prefill tokens rank 0 computed, from its status, and
// TTFT p50 and p99).
package prefix
