// Package sampler owns token selection on rank 0: a log-space Gumbel-max
// sampler (argmax(l/T + g), no softmax on the paths that do not need it) and
// Reference, the softmax-based algorithm it replaces, kept for tests and
// benchmarks. Noise comes from package noisepool. It imports no I/O packages.
package sampler
