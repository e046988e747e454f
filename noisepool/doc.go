// Package noisepool owns the sampler's Gumbel noise: a counter-based
// generator (noise is a pure function of stream key, row counter and token
// index) and an async ring buffer of pre-generated rows.
//
// It does not own sampling (package sampler) and imports no I/O packages.
package noisepool
