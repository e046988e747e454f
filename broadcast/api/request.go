package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tpcoord/tpcoord/internal/fielderr"
)

// GenerateRequest is the JSON body of a request on tpc.<job>.generate.
// Sampling parameters sit beside the prompt, as in vLLM's API.
type GenerateRequest struct {
	PromptTokenIDs []int32 `json:"prompt_token_ids"`
	MaxTokens      int     `json:"max_tokens"`
	// Keepalive promises keepalives on tpc.<job>.client every
	// KeepaliveInterval until the request ends (Generate sends them): rank
	// 0 then cancels the request once its client has been silent for the
	// client timeout, counted from submission, so a client that dies at
	// once does not leave its request decoding. Without it a request is
	// never timed out.
	Keepalive bool `json:"keepalive,omitempty"`
	// Group is how many requests its client sends at once with this one,
	// this one included, and needs all of (the gateway's n choices of
	// every prompt); 0 or 1: alone. Rank 0 refuses, as invalid and naming
	// n, a group larger than its queue (MaxQueue): arriving together, its
	// requests could never all be admitted, and every retry would be
	// refused as overloaded.
	Group int `json:"group,omitempty"`
	// RequestID names the request across resubmissions: a request
	// submitted with the ID of one rank 0 still holds replaces it (that one
	// ends cancelled, superseded), so a request its client retried after a
	// fault never runs twice. At most MaxRequestIDBytes printable ASCII.
	RequestID string `json:"request_id,omitempty"`
	// ResumeTokenIDs are output tokens the request produced before a
	// fault: rank 0 continues after them, at the noise positions they
	// took, so a seeded or greedy request ends as it would have without
	// the fault. They count toward max_tokens; at least one token must be
	// left to generate.
	ResumeTokenIDs []int32 `json:"resume_token_ids,omitempty"`
	Params
}

// MaxRequestIDBytes bounds a request ID.
const MaxRequestIDBytes = 128

// MaxPromptTokens bounds a prompt so one request cannot exhaust memory.
const MaxPromptTokens = 1 << 16

// MaxSequenceTokens bounds a prompt and its output together: what one
// sequence of a step message may carry (a request resumed in a new epoch
// is admitted with all its tokens). The step codec's bound
// (broadcast.MaxPromptLen) is this number.
const MaxSequenceTokens = 1 << 20

// ParseGenerateRequest decodes and validates a request. Errors name the
// offending JSON field.
func ParseGenerateRequest(data []byte, vocab int) (*GenerateRequest, error) {
	if err := exactFields(data); err != nil {
		return nil, err
	}
	// Omitted sampling fields take vLLM's defaults (temperature 1).
	r := GenerateRequest{Params: DefaultParams()}
	dec := json.NewDecoder(bytes.NewReader(data))
	// A misspelt field ("temprature") must not run at the default quietly.
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return nil, fielderr.New(strings.Trim(f, `"`), "unknown field (not a request field)")
		}
		return nil, fmt.Errorf("request: invalid JSON: %w", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("request: invalid JSON: more data after the request object")
	}
	if err := r.Validate(vocab); err != nil {
		return nil, err
	}
	return &r, nil
}

// Validate checks the request against a vocabulary of the given size.
func (r *GenerateRequest) Validate(vocab int) error {
	switch {
	case len(r.PromptTokenIDs) == 0:
		return fielderr.New("prompt_token_ids", "must not be empty")
	case len(r.PromptTokenIDs) > MaxPromptTokens:
		return fielderr.New("prompt_token_ids", "%d tokens, at most %d allowed", len(r.PromptTokenIDs), MaxPromptTokens)
	case r.MaxTokens <= 0:
		return fielderr.New("max_tokens", "must be > 0, got %d", r.MaxTokens)
	case r.Group < 0:
		return fielderr.New("group", "must be >= 0, got %d", r.Group)
	case r.MaxTokens > MaxSequenceTokens-len(r.PromptTokenIDs): // both bounded: no overflow
		return fielderr.New("max_tokens", "%d, but the prompt (%d tokens) and its output may hold at most %d tokens", r.MaxTokens, len(r.PromptTokenIDs), MaxSequenceTokens)
	case len(r.ResumeTokenIDs) >= r.MaxTokens:
		return fielderr.New("resume_token_ids", "%d tokens leave none of max_tokens (%d) to generate", len(r.ResumeTokenIDs), r.MaxTokens)
	}
	if err := checkRequestID(r.RequestID); err != nil {
		return err
	}
	for i, t := range r.ResumeTokenIDs {
		if t < 0 || int(t) >= vocab {
			return fielderr.New(fmt.Sprintf("resume_token_ids[%d]", i), "token %d out of range [0, %d)", t, vocab)
		}
	}
	for i, t := range r.PromptTokenIDs {
		if t < 0 || int(t) >= vocab {
			return fielderr.New(fmt.Sprintf("prompt_token_ids[%d]", i), "token %d out of range [0, %d)", t, vocab)
		}
	}
	return r.Params.Validate(vocab)
}

// GenerateReply is one message of the reply stream: a token, or the final
// message with the finish reason (and the whole output), or an error.
type GenerateReply struct {
	Token        *int32  `json:"token,omitempty"`
	Index        int     `json:"index,omitempty"`
	Done         bool    `json:"done,omitempty"`
	FinishReason string  `json:"finish_reason,omitempty"`
	Tokens       []int32 `json:"tokens,omitempty"`
	Error        string  `json:"error,omitempty"`
	// ErrorCode says what kind of failure Error is (one of the Code*
	// constants; empty for other failures), so that a front end can answer
	// with the right status; ErrorParam names the request field at fault.
	ErrorCode  string   `json:"error_code,omitempty"`
	ErrorParam string   `json:"error_param,omitempty"`
	Timings    *Timings `json:"timings,omitempty"`
	// Logprobs of the token at Index, sent after the token's own message
	// when the request asked for logprobs.
	Logprobs *Logprobs `json:"logprobs,omitempty"`
	// TokenLogprobs is filled by the Generate client on the final reply:
	// every token's logprobs, in order. Rank 0 does not send it.
	TokenLogprobs []Logprobs `json:"token_logprobs,omitempty"`
}

// Error codes of a failed reply.
const (
	CodeInvalid     = "invalid_request" // the request is wrong (ErrorParam names the field)
	CodeOverloaded  = "overloaded"      // rank 0's queue is full: retry later
	CodeUnavailable = "unavailable"     // rank 0 is re-forming the world: retry later
)

// FailedReply is the final reply of a request that failed with err, with
// its code and the field at fault when err is a *fielderr.Error.
func FailedReply(err error, code string) GenerateReply {
	r := GenerateReply{Done: true, FinishReason: FinishError, Error: err.Error(), ErrorCode: code}
	var fe *fielderr.Error
	if errors.As(err, &fe) {
		r.ErrorParam = fe.Field
	}
	return r
}

// Timings of a finished request, in milliseconds, as rank 0 measured
// them from the request's arrival off the bus.
type Timings struct {
	QueueMs      float64 `json:"queue_ms"`       // arrival → first scheduled into a step
	FirstTokenMs float64 `json:"first_token_ms"` // arrival → first token sampled
	MeanITLMs    float64 `json:"mean_itl_ms"`    // between its tokens
	TotalMs      float64 `json:"total_ms"`       // arrival → finished
}

// PeerStatus is rank 0's view of one follower.
type PeerStatus struct {
	Rank           int     `json:"rank"`
	Epoch          uint32  `json:"epoch"`
	Step           uint64  `json:"step"`
	State          string  `json:"state"`
	HeartbeatAgeMs float64 `json:"heartbeat_age_ms"` // -1: never heard from
}

// RankStatus is one rank's reply on tpc.<job>.status.
type RankStatus struct {
	Rank   int    `json:"rank"`
	World  int    `json:"world_size"`
	Job    string `json:"job"`
	State  string `json:"state"`
	Epoch  uint32 `json:"epoch"`
	Step   uint64 `json:"step"`
	Digest string `json:"digest"`
	Rows   int    `json:"rows"`
	// Vocab is the executor's vocabulary size (rank 0; 0 if unknown).
	Vocab   int    `json:"vocab,omitempty"`
	Waiting int    `json:"waiting,omitempty"`
	Version string `json:"version,omitempty"`
	// Member is the agent's member name in the job's membership: which
	// process answers for the rank (a restarted one has a new name).
	Member string `json:"member,omitempty"`
	// Rejected counts messages refused by kind (malformed, stale epoch,
	// wrong sender, …), duplicates ignored, and on rank 0 the steps it
	// could not send while its connection recovered (step_unsent).
	Rejected map[string]uint64 `json:"rejected,omitempty"`
	// Peers is rank 0's view of the followers: what each last reported
	// and how long ago.
	Peers []PeerStatus `json:"peers,omitempty"`
	// Sampler holds rank 0's noise pool counters.
	Sampler map[string]uint64 `json:"sampler,omitempty"`
	// KV is rank 0's KV cache, when it schedules one.
	KV *KVStatus `json:"kv,omitempty"`
	// MaxModelLen is rank 0's bound on a request's tokens, prompt and
	// output (0: none).
	MaxModelLen int `json:"max_model_len,omitempty"`
	// Phase is where the decode loop is now (idle, await, publish,
	// forward, sample, reply) and PhaseMs how long it has been there, so
	// a stuck rank is named at a glance.
	Phase   string  `json:"phase,omitempty"`
	PhaseMs float64 `json:"phase_ms"`
	// RecentSteps are the flight recorder's last few steps, oldest first.
	RecentSteps []StepTiming `json:"recent_steps,omitempty"`
	// MetricsAddr is where this rank serves /metrics (empty: off).
	MetricsAddr string `json:"metrics_addr,omitempty"`
	// MaxStepTokens is the most tokens one step's forward pass fed in
	// this epoch (summed over its rows: one per decoding row, the chunk of
	// a prompt being prefilled), which the token budget bounds.
	MaxStepTokens int `json:"max_step_tokens"`
}

// KVStatus is the KV cache rank 0 schedules: its blocks, those held by
// sequences, the requests preempted (by recompute) in this epoch, and
// its prefix cache's lookups in this epoch.
type KVStatus struct {
	BlockSize   int    `json:"block_size"`
	Blocks      int    `json:"blocks"`
	Used        int    `json:"used"`
	Preemptions uint64 `json:"preemptions"`
	// PrefixCacheQueries and PrefixCacheHits count tokens, as vLLM's
	// prefix cache metrics do: every admitted request's length, and the
	// part of it found cached (0 with prefix caching off).
	PrefixCacheQueries uint64 `json:"prefix_cache_queries"`
	PrefixCacheHits    uint64 `json:"prefix_cache_hits"`
}

// StepTiming is one recorded step, as status and dumps show it.
type StepTiming struct {
	Step      uint64    `json:"step"`
	Start     time.Time `json:"start"`
	Rows      int       `json:"rows"`
	AwaitMs   float64   `json:"await_ms"`
	PublishMs float64   `json:"publish_ms,omitempty"`
	ForwardMs float64   `json:"forward_ms"`
	SampleMs  float64   `json:"sample_ms,omitempty"`
	ReplyMs   float64   `json:"reply_ms,omitempty"`
	TotalMs   float64   `json:"total_ms"`
	// Preempted counts the requests the step preempted (rank 0 with a KV
	// cache): freed, to be recomputed.
	Preempted int `json:"preempted,omitempty"`
}

// Finish reasons, as vLLM names them.
const (
	FinishLength    = "length"
	FinishStop      = "stop"
	FinishCancelled = "cancelled"
	FinishError     = "error"
)

// KeepaliveInterval is how often a client sends a keepalive: a few fit in
// rank 0's client timeout (rank.DefaultClientTimeout, 2 s).
const KeepaliveInterval = 400 * time.Millisecond

// Message is a requester's message on tpc.<job>.client about its request,
// which it names by the request's reply subject.
type Message struct {
	Reply string `json:"reply"`
	Op    string `json:"op"` // "cancel" or "keepalive"
}

// KeepaliveAck is rank 0's answer to a keepalive sent with a reply subject:
// whether it still holds the request (waiting, decoding, or held across a
// re-formation). A client that hears "not known" twice in a row stops
// waiting: rank 0 restarted, or the request ended and its last message was
// lost.
type KeepaliveAck struct {
	Known bool `json:"known"`
	// Gone, set by a supervisor (launch) answering for a rank 0 that died,
	// says why: the client stops waiting at once, with that reason.
	Gone string `json:"gone,omitempty"`
}

// checkRequestID refuses an ID that is too long or not printable ASCII.
func checkRequestID(id string) error {
	if len(id) > MaxRequestIDBytes {
		return fielderr.New("request_id", "is %d bytes, at most %d", len(id), MaxRequestIDBytes)
	}
	for i := 0; i < len(id); i++ {
		if id[i] < 0x21 || id[i] > 0x7e {
			return fielderr.New("request_id", "byte %d is 0x%02x: printable ASCII only", i, id[i])
		}
	}
	return nil
}
