package rank

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"time"
)

// Batch is what one Forward call runs: the rows of step Step of epoch
// Epoch, in order. Steps restart at 1 in every epoch; an executor that
// keeps state per sequence (a worker's KV caches) starts over when the
// epoch changes.
type Batch struct {
	Epoch uint32
	Step  uint64
	Rows  []*Seq
}

// KVCapacity is an executor's KV cache: what a worker's handshake
// reported, or what the synthetic executor models. Zero: none.
type KVCapacity struct {
	BlockSize   int // tokens per block
	Blocks      int // blocks in the pool
	MaxModelLen int // the model's context, 0: none
}

// CapacityReporter is implemented by executors that know their KV
// capacity.
type CapacityReporter interface {
	KVCapacity() KVCapacity
}

// Executor runs the model's forward pass for one rank. On a card the TP
// collectives happen inside Forward; only rank 0 gets logits back.
type Executor interface {
	// Forward returns len(b.Rows)×Vocab() logits, row-major, on rank 0 and
	// nil on other ranks. The slice is the executor's and is valid until
	// the next call.
	Forward(ctx context.Context, b Batch) ([]float32, error)
	Vocab() int
	Close() error
}

// SyntheticConfig configures the synthetic executor.
type SyntheticConfig struct {
	Vocab       int
	EOS         int32         // -1 for none
	ForwardTime time.Duration // wall time of one forward pass
	Logits      bool          // produce logits (rank 0)
}

// Synthetic is a deterministic load generator standing in for a model. Its
// logits are long-tailed (Zipf-like over a fixed permutation of the
// vocabulary), with a few likely next tokens chosen by hashing the row's
// last token, and an EOS logit that grows with the output length from a
// point that depends on the prompt. A row's logits depend only on its own
// prompt and output, never on the batch around it, so the same request
// gives the same tokens whatever else runs.
type Synthetic struct {
	cfg    SyntheticConfig
	base   []float32
	logits []float32
}

var _ Executor = (*Synthetic)(nil)

// Candidate next tokens and their lift above the best tail logit.
var syntheticLifts = [...]float32{6, 5, 4, 3}

// NewSynthetic builds the executor; the base row is computed once.
func NewSynthetic(cfg SyntheticConfig) (*Synthetic, error) {
	if cfg.Vocab < len(syntheticLifts)+1 {
		return nil, fmt.Errorf("vocab: synthetic executor needs at least %d tokens, got %d", len(syntheticLifts)+1, cfg.Vocab)
	}
	if cfg.EOS >= int32(cfg.Vocab) {
		return nil, fmt.Errorf("eos: token %d is outside the vocabulary of %d", cfg.EOS, cfg.Vocab)
	}
	s := &Synthetic{cfg: cfg}
	if cfg.Logits {
		// Token i has popularity rank perm(i); logit -1.1·ln(1+rank).
		s.base = make([]float32, cfg.Vocab)
		for i := range s.base {
			r := mix(uint64(i)) % uint64(cfg.Vocab)
			s.base[i] = float32(-1.1 * math.Log1p(float64(r)))
		}
	}
	return s, nil
}

// Vocab is the configured vocabulary size: the width of a logits row.
func (s *Synthetic) Vocab() int { return s.cfg.Vocab }

// Close has nothing to release: the executor holds only memory.
func (s *Synthetic) Close() error { return nil }

// OverlapsStep is true: the stand-in's ranks share no collective, so
// rank 0's forward pass need not wait for its step message to be written
// (see StepOverlapper); Forward gives way before its fill, and the write
// goes out then.
func (s *Synthetic) OverlapsStep() bool { return true }

// Forward fills the logits (rank 0) and then waits out the rest of the
// configured forward time, as a card would.
//
// A card computes while the rank's goroutines run; this stand-in computes
// rank 0's logits on the rank's own P. It first gives way
// (runtime.Gosched), so that the goroutines the last step woke run before
// the fill rather than after it: rank 0's step sender, whose write to the
// bus the followers wait for, and nats.go's flusher, which on a rank with
// one P would otherwise hold the step's token replies for the whole fill
// (1.4 ms at batch 32, vocab 100352). It then gives way after every
// fillGiveWay of filling, as the noise producers do: a card leaves the
// host's cores to rank 0's goroutines, and a fill that held rank 0's only
// P was charged to them. Its first fill at a larger batch writes fresh
// pages (on the benchmarks' VM 20–40 ms of page faults for 32 rows),
// and without giving way the noise producer got none of that forward
// pass, so the next step made its rows inline. The forward time runs from
// the call, as a card's would from its launch.
func (s *Synthetic) Forward(ctx context.Context, b Batch) ([]float32, error) {
	deadline := time.Now().Add(s.cfg.ForwardTime)
	var out []float32
	if s.cfg.Logits {
		runtime.Gosched()
		n := len(b.Rows) * s.cfg.Vocab
		if cap(s.logits) < n {
			s.logits = make([]float32, n)
		}
		out = s.logits[:n]
		since := time.Now()
		for i, r := range b.Rows {
			dst := out[i*s.cfg.Vocab : (i+1)*s.cfg.Vocab]
			for off := 0; off < len(dst); off += fillChunk {
				copy(dst[off:min(off+fillChunk, len(dst))], s.base[off:])
				if now := time.Now(); now.Sub(since) >= fillGiveWay {
					runtime.Gosched()
					since = time.Now()
				}
			}
			s.lift(r, dst)
		}
	}
	if err := WaitUntil(ctx, deadline); err != nil {
		return nil, err
	}
	return out, nil
}

// fillChunk is how many logits Forward copies between its checks of the
// time (32 KB: a few microseconds warm, a few tens with page faults), and
// fillGiveWay how long it fills before it gives way.
const (
	fillChunk   = 8192
	fillGiveWay = 50 * time.Microsecond
)

// Row writes the logits of one sequence into dst (len Vocab).
func (s *Synthetic) Row(r *Seq, dst []float32) {
	copy(dst, s.base)
	s.lift(r, dst)
}

// lift raises the logits of r's likely next tokens, and its EOS logit,
// in dst, a copy of the base row.
func (s *Synthetic) lift(r *Seq, dst []float32) {
	v := uint64(s.cfg.Vocab)
	last := uint64(uint32(r.Last()))
	for j, lift := range syntheticLifts {
		dst[mix(last*8+uint64(j)+1)%v] = lift
	}
	if s.cfg.EOS >= 0 {
		// EOS overtakes the top candidate around output length L, where L is
		// between 8 and 47 depending on the prompt.
		var ph uint64
		for _, t := range r.Prompt {
			ph = mix(ph ^ uint64(uint32(t)))
		}
		l := 8 + float32(ph%40)
		dst[s.cfg.EOS] = syntheticLifts[0] + 0.5 + 0.75*(float32(len(r.Output))-l)
	}
}

// mix is SplitMix64's finaliser: a cheap, well-spread hash.
func mix(z uint64) uint64 {
	z += 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}
