// Package sampler owns token selection on rank 0: a log-space Gumbel-max
// sampler (argmax(l/T + g), no softmax on the paths that do not need it) and
// Reference, the softmax-based algorithm it replaces, kept for tests and
// benchmarks. Noise comes from package noisepool. It imports no I/O packages.
//
// Use: s := New(DefaultConfig()); per step fill a []Row (logits, Params,
// token history, noise identity and optionally a pool noise row) and call
// s.Sample(rows, results). Logprobs are computed afterwards, off the
// critical path, with s.Logprobs. The processing order is vLLM v0
// Sampler's, after a grammar's mask (Row.Allow, structured outputs):
// allowed_token_ids, logit_bias, min_tokens, penalties, greedy,
// temperature, top-k, top-p, min-p, then the Gumbel-max draw; the source
// states the exact arithmetic of each step next to the constants it uses.
//
// Exactness: whatever path a row takes (pool or inline noise, sparse or
// dense, pruned or not), the token is exactly the argmax over all kept tokens of
// float32(float32(l·float32(1/T)) + noisepool.Gumbel(key, row, i)), lowest
// index on ties. The tests check this bit for bit against a brute-force
// full-row computation.
//
// The package does not own the noise pool (noisepool), the 16-bit float
// conversion (internal/f16), or whether a token ends its request (stop
// tokens, EOS, max_tokens): rank's Scheduler decides that, in one place.
// The sampler only masks stop tokens and EOS while min_tokens holds.
package sampler
