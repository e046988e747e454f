package sampler

import (
	"errors"
	"fmt"

	"github.com/tpcoord/tpcoord/broadcast/api"
)

// Dtype is the element type of a logits row.
type Dtype uint8

// Logits element types. Float16 is IEEE 754 binary16; BFloat16 is the top
// half of a float32. Both are converted to float32 on the fly.
const (
	Float32 Dtype = iota
	Float16
	BFloat16
)

func (d Dtype) String() string {
	switch d {
	case Float32:
		return "f32"
	case Float16:
		return "f16"
	case BFloat16:
		return "bf16"
	}
	return fmt.Sprintf("Dtype(%d)", uint8(d))
}

// ParseDtype accepts f32, f16 and bf16 (and the long forms float32,
// float16, bfloat16).
func ParseDtype(s string) (Dtype, error) {
	switch s {
	case "f32", "float32":
		return Float32, nil
	case "f16", "float16":
		return Float16, nil
	case "bf16", "bfloat16":
		return BFloat16, nil
	}
	return 0, fmt.Errorf("unknown dtype %q (want f32, f16 or bf16)", s)
}

// Row is one sequence's input to a sampling step.
//
// The logits are Logits when Dtype is Float32, else Logits16 holding raw
// float16 or bfloat16 bits. The sampler never writes to either.
//
// Noise: the row's Gumbel noise is the pure function
// noisepool.Gumbel(NoiseKey, NoiseRow, i). Noise, when non-nil, must be that
// row pre-filled by the pool (len == vocab), or with NoiseBound the pool's
// bound row (noisepool.FormBound: Noise[i] >= the Gumbel value), from which
// the sampler computes exact values only for tokens whose bound can win;
// when nil the sampler computes only the values it needs inline. The
// chosen token is the same every way.
type Row struct {
	Logits   []float32
	Logits16 []uint16
	Dtype    Dtype

	// Params are the request's sampling parameters; nil means DefaultParams().
	Params *api.Params
	// Prompt and Output are the request's token history: repetition
	// penalty looks at both, frequency and presence penalties and
	// min_tokens at Output.
	Prompt, Output []int32
	// EOS is the end-of-sequence token, blocked while min_tokens is not
	// reached and reported as a stop unless IgnoreEOS; -1 for none.
	EOS int32

	NoiseKey, NoiseRow uint64
	Noise              []float32
	NoiseBound         bool
	// NoiseBlockMax, when non-nil (with Noise), is the largest of Noise in
	// each block of noisepool.BlockSize tokens (noisepool.FillBlockMax,
	// len == noisepool.BlockCount(vocab)): a block whose largest logit
	// plus its largest noise cannot reach the best score is skipped
	// without reading its noise.
	NoiseBlockMax []float32

	// Allow, when non-nil, is the set of tokens the row may produce (a
	// grammar's mask): bit i%64 of Allow[i/64] is set for an allowed token
	// i; a token past the end of Allow is not allowed. Every other token's
	// logit is −Inf before any other step, so the Gumbel-max over the
	// allowed tokens samples exactly from the distribution renormalised
	// over them, and top-k, top-p and min-p act on that distribution. The
	// caller owns Allow; the sampler only reads it.
	Allow []uint64
}

// Vocab is the row's vocabulary size.
func (r *Row) Vocab() int {
	if r.Dtype == Float32 {
		return len(r.Logits)
	}
	return len(r.Logits16)
}

// Result is the outcome of sampling one row.
type Result struct {
	Token int32
	// Err is a per-row error (bad logits, bad parameters); Token is -1.
	Err error
}

// ErrNoCandidates is returned for a row in which every token is masked
// (−inf) after processing, e.g. allowed_token_ids all blocked by min_tokens.
var ErrNoCandidates = errors.New("sampler: every token is masked")

// Config configures a Sampler.
type Config struct {
	// Vocab pre-sizes scratch buffers; 0 grows them on first use.
	Vocab int
	// CheckParams runs Params.Validate on every row. Callers that validate
	// at admission can turn it off; the sampler still range-checks token
	// IDs so a bad ID is a row error, never a panic.
	CheckParams bool
}

// DefaultConfig returns the defaults: no pre-sizing, parameters checked.
func DefaultConfig() Config { return Config{CheckParams: true} }

// Validate reports a configuration error.
func (c Config) Validate() error {
	if c.Vocab < 0 {
		return fmt.Errorf("sampler: Vocab must be >= 0, got %d", c.Vocab)
	}
	return nil
}

var defaultParams = api.DefaultParams()
