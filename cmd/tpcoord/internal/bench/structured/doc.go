// Package structured is `tpcoord bench structured`: what grammar-
// constrained sampling costs a batch's output tokens/s. It starts one job
// (`tpcoord launch`, synthetic executor, a tokenizer on rank 0) and runs
// rounds of two batches of concurrent requests, the same size: one
// unconstrained (ignore_eos) and one with every row constrained by a
// nested JSON Schema, alternating which goes first. It reports each
// batch's output tokens/s over the tokens actually produced (a
// constrained output may end early, at its grammar's end), the ratio
// constrained/unconstrained per round and over the rounds, and rank 0's
// step phases per kind from its flight recorder, the sample phase
// included: where the masks' cost would show if the forward pass did not
// hide it.
package structured
