package api

import (
	"fmt"
	"math"

	"github.com/tpcoord/tpcoord/internal/fielderr"
)

// Params are one request's sampling parameters. JSON names follow vLLM's
// SamplingParams so requests are portable.
type Params struct {
	Temperature       float32           `json:"temperature"`
	TopK              int               `json:"top_k,omitempty"`
	TopP              float32           `json:"top_p,omitempty"`
	MinP              float32           `json:"min_p,omitempty"`
	RepetitionPenalty float32           `json:"repetition_penalty,omitempty"`
	FrequencyPenalty  float32           `json:"frequency_penalty,omitempty"`
	PresencePenalty   float32           `json:"presence_penalty,omitempty"`
	LogitBias         map[int32]float32 `json:"logit_bias,omitempty"`
	AllowedTokenIDs   []int32           `json:"allowed_token_ids,omitempty"`
	StopTokenIDs      []int32           `json:"stop_token_ids,omitempty"`
	MinTokens         int               `json:"min_tokens,omitempty"`
	IgnoreEOS         bool              `json:"ignore_eos,omitempty"`
	Seed              *uint64           `json:"seed,omitempty"`
	Logprobs          *int              `json:"logprobs,omitempty"`
	// StructuredOutputs, when set, constrains the output to a language.
	StructuredOutputs *StructuredOutputs `json:"structured_outputs,omitempty"`
}

// MaxLogitBias bounds a request's logit_bias entries. Every entry costs
// rank 0 a parse when the request arrives and an add at every step, and n
// choices multiply both: 64 choices of 30,000 entries kept rank 0 busy
// long enough to miss heartbeats. 1,024 is more than OpenAI's API allows
// (300) and far more than banning or boosting a list of words needs.
const MaxLogitBias = 1024

// MaxStopTokenIDs bounds stop_token_ids: every finished step looks its
// token up in them, for every row.
const MaxStopTokenIDs = 1024

// GreedyBelow is the temperature under which sampling is greedy (argmax).
const GreedyBelow = 1e-5

// Validate checks p against a vocabulary of the given size. Errors name the
// JSON field (*fielderr.Error).
func (p *Params) Validate(vocab int) error {
	finite := func(name string, v float32) error {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return fielderr.New(name, "must be finite, got %v", v)
		}
		return nil
	}
	for _, f := range []struct {
		name string
		v    float32
	}{{"temperature", p.Temperature}, {"top_p", p.TopP}, {"min_p", p.MinP}, {"repetition_penalty", p.RepetitionPenalty}, {"frequency_penalty", p.FrequencyPenalty}, {"presence_penalty", p.PresencePenalty}} {
		if err := finite(f.name, f.v); err != nil {
			return err
		}
	}
	switch {
	case p.Temperature < 0:
		return fielderr.New("temperature", "must be >= 0, got %v", p.Temperature)
	case p.TopK < 0 || p.TopK > vocab:
		return fielderr.New("top_k", "must be in [0, %d] (0 disables), got %d", vocab, p.TopK)
	case p.TopP < 0 || p.TopP > 1:
		return fielderr.New("top_p", "must be in [0, 1] (0 or 1 disables), got %v", p.TopP)
	case p.MinP < 0 || p.MinP > 1:
		return fielderr.New("min_p", "must be in [0, 1], got %v", p.MinP)
	case p.RepetitionPenalty < 0:
		return fielderr.New("repetition_penalty", "must be > 0 (0 means unset, 1 disables), got %v", p.RepetitionPenalty)
	case p.FrequencyPenalty < -2 || p.FrequencyPenalty > 2:
		return fielderr.New("frequency_penalty", "must be in [-2, 2], got %v", p.FrequencyPenalty)
	case p.PresencePenalty < -2 || p.PresencePenalty > 2:
		return fielderr.New("presence_penalty", "must be in [-2, 2], got %v", p.PresencePenalty)
	case p.MinTokens < 0:
		return fielderr.New("min_tokens", "must be >= 0, got %d", p.MinTokens)
	case p.Logprobs != nil && (*p.Logprobs < 0 || *p.Logprobs > 20):
		return fielderr.New("logprobs", "must be in [0, 20], got %d", *p.Logprobs)
	}
	if p.StructuredOutputs != nil {
		if err := p.StructuredOutputs.Validate(); err != nil {
			return err
		}
		if p.IgnoreEOS {
			return fielderr.New("ignore_eos", "cannot be set with structured outputs: the output ends where its grammar does")
		}
		if p.MinTokens > 0 {
			return fielderr.New("min_tokens", "cannot be set with structured outputs: the output ends where its grammar does, which may be sooner")
		}
	}
	if len(p.LogitBias) > MaxLogitBias {
		return fielderr.New("logit_bias", "has %d entries, at most %d", len(p.LogitBias), MaxLogitBias)
	}
	for tok, b := range p.LogitBias {
		if tok < 0 || int(tok) >= vocab {
			return fielderr.New("logit_bias", "token %d out of range [0, %d)", tok, vocab)
		}
		if err := finite(fmt.Sprintf("logit_bias[%d]", tok), b); err != nil {
			return err
		}
	}
	switch {
	case len(p.StopTokenIDs) > MaxStopTokenIDs:
		return fielderr.New("stop_token_ids", "has %d entries, at most %d", len(p.StopTokenIDs), MaxStopTokenIDs)
	case len(p.AllowedTokenIDs) > vocab:
		// More would repeat tokens; each costs rank 0 at every step.
		return fielderr.New("allowed_token_ids", "has %d entries, more than the vocabulary's %d tokens", len(p.AllowedTokenIDs), vocab)
	}
	for _, f := range [...]struct {
		name string
		ids  []int32
	}{{"allowed_token_ids", p.AllowedTokenIDs}, {"stop_token_ids", p.StopTokenIDs}} {
		for _, t := range f.ids {
			if t < 0 || int(t) >= vocab {
				return fielderr.New(f.name, "token %d out of range [0, %d)", t, vocab)
			}
		}
	}
	return nil
}

// DefaultParams returns vLLM's SamplingParams defaults: temperature 1,
// everything else disabled.
func DefaultParams() Params {
	return Params{Temperature: 1, TopP: 1, RepetitionPenalty: 1}
}
