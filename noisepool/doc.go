// Package noisepool owns the sampler's Gumbel noise: a counter-based
// generator, in which noise is a pure function of (stream key, row counter,
// token index) (Gumbel, FillRow, FillIndices, and the stages RowSeed, Bits,
// GumbelFromBits), stream keys (StreamKey, NewBase), and Pool, an async ring
// buffer of rows that background producers fill ahead of the consumer.
// A pool row holds either the exact values or upper bounds on them
// (FormBound, BoundFromBits: a hash and a table load a value, no logs),
// and a pool sizes its own producers from the measured cost of a row
// (AutoProducers, ProducersFor).
//
// Every path (scalar, portable block kernel, AVX-512 kernel, exact pool
// rows, inline) gives the same bits on every architecture, and so do bound
// rows, which hold BoundFromBits of the same bits. A pool's default form
// (FormAuto) depends on the machine: exact with the AVX-512 kernel, bound
// elsewhere. Benchmarks and measured
// accuracy: docs/benchmarks-noise.md.
//
// It does not own sampling (package sampler) and imports no I/O packages.
package noisepool
