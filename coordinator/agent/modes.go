package agent

import (
	"slices"
	"strings"

	"github.com/tpcoord/tpcoord/internal/fielderr"
)

// Executor is what runs the forward passes (Config.Executor).
type Executor string

// Executors.
const (
	ExecutorSynthetic Executor = "synthetic" // the built-in load generator (rank.NewSynthetic)
	ExecutorWorker    Executor = "worker"    // a model worker process (Config.Worker)
)

// OnPeerLoss is what a job does when a rank is lost (Config.OnPeerLoss).
type OnPeerLoss string

// Peer-loss policies.
const (
	// OnPeerLossFail answers open requests with an error and ends Run with
	// rank.ErrPeerLost (tpcoord agent exits 3).
	OnPeerLossFail OnPeerLoss = "fail"
	// OnPeerLossWait holds rank 0's open requests, re-forms the world when
	// the rank is back, and resumes them in a new epoch.
	OnPeerLossWait OnPeerLoss = "wait"
)

// Noise is where rank 0's Gumbel noise comes from (Config.Noise).
type Noise string

// Noise sources; each gives the same tokens.
const (
	// NoisePool pre-generates full noise rows on background producers
	// (Config.NoisePool).
	NoisePool Noise = "pool"
	// NoiseInline has the sampler compute the noise values it reads.
	NoiseInline Noise = "inline"
	// NoiseSync generates every full noise row on the step's critical
	// path: a benchmark baseline (tpcoord bench e2e), not for production.
	NoiseSync Noise = "sync"
)

// Sampling is rank 0's sampler (Config.Sampling).
type Sampling string

// Samplers; each gives the same tokens.
const (
	// SamplingLogspace is sampler.Sampler: Gumbel-max in log space.
	SamplingLogspace Sampling = "logspace"
	// SamplingSoftmax is sampler.Reference (softmax with exponential
	// noise): a benchmark baseline (tpcoord bench e2e).
	SamplingSoftmax Sampling = "softmax"
)

// SamplingRanks are the ranks that sample (Config.SamplingRanks).
type SamplingRanks string

// Sampling ranks.
const (
	// SamplingRanksRank0: rank 0 alone computes logits and samples.
	SamplingRanksRank0 SamplingRanks = "rank0"
	// SamplingRanksAll: every rank computes logits and samples, followers
	// discard their tokens (rank.DriverConfig.FollowerPick): a benchmark
	// baseline (tpcoord bench e2e).
	SamplingRanksAll SamplingRanks = "all"
)

// The values each mode accepts, in the order errors and help list them.
var (
	executors     = []Executor{ExecutorSynthetic, ExecutorWorker}
	peerLosses    = []OnPeerLoss{OnPeerLossFail, OnPeerLossWait}
	noises        = []Noise{NoisePool, NoiseInline, NoiseSync}
	samplings     = []Sampling{SamplingLogspace, SamplingSoftmax}
	samplingRanks = []SamplingRanks{SamplingRanksRank0, SamplingRanksAll}
)

// Validate reports whether e is one of the executors; the error names
// the field Executor and lists them.
func (e Executor) Validate() error { return checkMode("Executor", e, executors) }

// Validate reports whether p is one of the policies; the error names the
// field OnPeerLoss and lists them.
func (p OnPeerLoss) Validate() error { return checkMode("OnPeerLoss", p, peerLosses) }

// Validate reports whether n is one of the noise sources; the error names
// the field Noise and lists them.
func (n Noise) Validate() error { return checkMode("Noise", n, noises) }

// Validate reports whether s is one of the samplers; the error names the
// field Sampling and lists them.
func (s Sampling) Validate() error { return checkMode("Sampling", s, samplings) }

// Validate reports whether s is one of the values; the error names the
// field SamplingRanks and lists them.
func (s SamplingRanks) Validate() error { return checkMode("SamplingRanks", s, samplingRanks) }

// checkMode refuses a value of field that is not one of allowed.
func checkMode[M ~string](field string, v M, allowed []M) error {
	if slices.Contains(allowed, v) {
		return nil
	}
	names := make([]string, len(allowed))
	for i, a := range allowed {
		names[i] = string(a)
	}
	return fielderr.New(field, "%q is not one of %s", v, strings.Join(names, ", "))
}
