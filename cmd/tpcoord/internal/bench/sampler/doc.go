// Package sampler is `tpcoord bench sampler`: the time of one
// Sampler.Sample call (or the Reference's) over a batch of LLM-like rows
// (sampler.SyntheticLogits), one thread, in this process. In its files the
// name sampler is the package it times, github.com/tpcoord/tpcoord/sampler.
package sampler
