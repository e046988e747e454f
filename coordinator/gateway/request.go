package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"

	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/internal/fielderr"
)

// Bounds on one HTTP request, beyond those of each NATS request.
const (
	// MaxChoices bounds prompts × n: the NATS requests one HTTP request
	// may fan out to.
	MaxChoices = 64
	// MaxStops bounds the stop strings of a request, MaxStopBytes each.
	MaxStops     = 16
	MaxStopBytes = 256
	// MaxPromptBytes bounds the text of one prompt (or of a rendered
	// chat), about four bytes a token of api.MaxPromptTokens. It also
	// bounds the tokenizer's work: BPE on one long word grows faster than
	// its length (docs/tokenizer.md).
	MaxPromptBytes = 4 * api.MaxPromptTokens
)

// samplingFields are the fields /v1/completions and /v1/chat/completions
// share: OpenAI's, and vLLM's extensions (top_k, min_p, the repetition
// penalty, stop_token_ids, ignore_eos, min_tokens).
type samplingFields struct {
	Model             string             `json:"model"`
	MaxTokens         *int               `json:"max_tokens"`
	Temperature       *float32           `json:"temperature"`
	TopP              *float32           `json:"top_p"`
	TopK              *int               `json:"top_k"`
	MinP              *float32           `json:"min_p"`
	Seed              *int64             `json:"seed"`
	Stop              json.RawMessage    `json:"stop"`
	StopTokenIDs      []int32            `json:"stop_token_ids"`
	LogitBias         map[string]float32 `json:"logit_bias"`
	N                 *int               `json:"n"`
	IgnoreEOS         bool               `json:"ignore_eos"`
	MinTokens         int                `json:"min_tokens"`
	RepetitionPenalty *float32           `json:"repetition_penalty"`
	PresencePenalty   *float32           `json:"presence_penalty"`
	FrequencyPenalty  *float32           `json:"frequency_penalty"`
	Stream            bool               `json:"stream"`
	StreamOptions     *struct {
		IncludeUsage bool `json:"include_usage"`
		// ContinuousUsageStats is vLLM's (usage in every chunk): accepted,
		// not done.
		ContinuousUsageStats bool `json:"continuous_usage_stats"`
	} `json:"stream_options"`
	User string `json:"user"` // accepted, unused
	structuredFields
}

// completionRequest is the body of POST /v1/completions.
type completionRequest struct {
	samplingFields
	Prompt   json.RawMessage `json:"prompt"`
	Logprobs *int            `json:"logprobs"`
	Echo     bool            `json:"echo"`
	BestOf   *int            `json:"best_of"`
	Suffix   *string         `json:"suffix"`
}

// tooLarge is the answer to a body larger than limit.
func tooLarge(limit int64) *apiError {
	return &apiError{Status: http.StatusRequestEntityTooLarge, Message: fmt.Sprintf("the request body is larger than %d bytes (--max-body-bytes)", limit), Type: "invalid_request_error"}
}

// decodeStrict decodes one JSON object into v under the field policy
// (fields.go): it returns the top-level fields it ignored, or the refusal
// of an unknown nested field, a typo, an unsupported or repeated field, or
// trailing data. A body that stalls past the server's read deadline is a
// 408.
func decodeStrict(body io.Reader, v any) ([]string, *apiError) {
	data, err := io.ReadAll(body)
	if err != nil {
		return nil, readError(err)
	}
	data, ignored, e := topLevel(data, v)
	if e != nil {
		return nil, e
	}
	return ignored, decodeKnown(data, v)
}

// readError is the answer to a body that could not be read.
func readError(err error) *apiError {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return tooLarge(mbe.Limit)
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return &apiError{Status: http.StatusRequestTimeout, Message: "the request body did not arrive in time", Type: "invalid_request_error", Code: "request_timeout"}
	}
	return badRequest("", "cannot read the body: %v", err)
}

// decodeKnown decodes the JSON object data into v, refusing unknown
// fields (nested ones: the top level's are sorted out) and trailing data.
func decodeKnown(data []byte, v any) *apiError {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			f = strings.Trim(f, `"`)
			return badRequest(f, "unknown field (this server does not support it)")
		}
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			f := strings.TrimPrefix(te.Field, "samplingFields.") // the embedded struct's name is no field of the API
			return badRequest(f, "expected %s, got %s", te.Type, te.Value)
		}
		return badRequest("", "invalid JSON body: %v", err)
	}
	if dec.More() {
		return badRequest("", "invalid JSON body: more data after the request object")
	}
	return nil
}

// plan is what an HTTP request asks for, checked: the NATS requests to
// send (one per prompt and choice) and how to answer.
type plan struct {
	model        string
	prompts      [][]int32
	n            int
	base         api.GenerateRequest // sampling and max_tokens; no prompt
	stops        []string
	logprobs     *int // top logprobs per token; nil: none
	stream       bool
	includeUsage bool
	// promptParam is the request field the prompt came from: prompt, or
	// messages (rendered by the chat template).
	promptParam string
	tools       *toolPlan // chat with tools; nil: none
	// seed is the request's seed: the client's, or one drawn for it in
	// [0, 2^63), so that it is a seed the client could have sent. The
	// answer reports it (SeedHeader).
	seed uint64
}

// requestParam renames, in e, a field of the NATS request that the HTTP
// request does not have: prompt_token_ids (or one of its tokens) came
// from the prompt field. The message keeps the NATS field, which locates
// the token.
func (p *plan) requestParam(e *apiError) *apiError {
	if e == nil || !strings.HasPrefix(e.Param, "prompt_token_ids") {
		return e
	}
	e.Message = p.promptParam + ": " + e.Message
	e.Param = p.promptParam
	return e
}

// requests returns the NATS request of every choice, in OpenAI's order
// (prompt-major). The choice of index k (the answer's choices[].index,
// counted across prompts) draws with seed+k, so choices differ, even of
// the same prompt twice, and each is reproducible. A request without a
// seed gets one
// drawn for it, used exactly as a client's: every choice then has a seed
// of its own, so a request continued after a fault (on any rank 0) draws
// the same tokens it would have drawn undisturbed, and sending the
// reported seed reproduces the whole answer. Each of several carries
// their number as its group, so rank 0 refuses, for good, more than its
// queue could hold.
func (p *plan) requests() []api.GenerateRequest {
	out := make([]api.GenerateRequest, 0, len(p.prompts)*p.n)
	group := 0
	if n := len(p.prompts) * p.n; n > 1 {
		group = n
	}
	for _, pr := range p.prompts {
		for range p.n {
			r := p.base
			r.PromptTokenIDs, r.Group = pr, group
			s := p.seed + uint64(len(out)) // wraps: any seed is fine
			r.Seed = &s
			out = append(out, r)
		}
	}
	return out
}

// sampling checks the shared fields into pl; defaultMax is max_tokens when
// the request leaves it out.
func (f *samplingFields) sampling(pl *plan, defaultMax int, haveText bool) *apiError {
	pl.model, pl.stream, pl.n = f.Model, f.Stream, 1
	if f.StreamOptions != nil {
		if !f.Stream {
			return badRequest("stream_options", "only with stream: true")
		}
		pl.includeUsage = f.StreamOptions.IncludeUsage
	}
	if f.N != nil {
		if *f.N < 1 || *f.N > MaxChoices {
			return badRequest("n", "must be in [1, %d], got %d", MaxChoices, *f.N)
		}
		pl.n = *f.N
	}
	r := api.GenerateRequest{MaxTokens: defaultMax, Params: api.DefaultParams()}
	if f.MaxTokens != nil {
		r.MaxTokens = *f.MaxTokens
	}
	if r.MaxTokens < 1 {
		return badRequest("max_tokens", "must be > 0, got %d", r.MaxTokens)
	}
	p := &r.Params
	setF(&p.Temperature, f.Temperature)
	setF(&p.TopP, f.TopP)
	setF(&p.MinP, f.MinP)
	setF(&p.RepetitionPenalty, f.RepetitionPenalty)
	setF(&p.PresencePenalty, f.PresencePenalty)
	setF(&p.FrequencyPenalty, f.FrequencyPenalty)
	if f.TopK != nil && *f.TopK != -1 { // -1 is vLLM's "off"
		p.TopK = *f.TopK
	}
	p.StopTokenIDs, p.IgnoreEOS, p.MinTokens = f.StopTokenIDs, f.IgnoreEOS, f.MinTokens
	if f.Seed != nil {
		if *f.Seed < 0 {
			return badRequest("seed", "must be >= 0, got %d", *f.Seed)
		}
		s := uint64(*f.Seed)
		p.Seed, pl.seed = &s, s
	} else {
		pl.seed = uint64(rand.Int64()) // [0, 2^63): a valid seed field
	}
	if e := f.logitBias(p); e != nil {
		return e
	}
	if err := p.Validate(math.MaxInt32); err != nil {
		return fieldError(err)
	}
	pl.base = r
	return f.stopStrings(pl, haveText)
}

func setF(dst *float32, v *float32) {
	if v != nil {
		*dst = *v
	}
}

// logitBias takes OpenAI's {"token id": bias} map.
func (f *samplingFields) logitBias(p *api.Params) *apiError {
	if len(f.LogitBias) == 0 {
		return nil
	}
	if len(f.LogitBias) > api.MaxLogitBias {
		return badRequest("logit_bias", "has %d entries, at most %d", len(f.LogitBias), api.MaxLogitBias)
	}
	p.LogitBias = make(map[int32]float32, len(f.LogitBias))
	for k, v := range f.LogitBias {
		id, err := strconv.ParseInt(k, 10, 32)
		if err != nil || id < 0 {
			return badRequest("logit_bias", "key %q is not a token ID", k)
		}
		if v < -100 || v > 100 || v != v {
			return badRequest("logit_bias", "bias %v for token %d is outside [-100, 100]", v, id)
		}
		p.LogitBias[int32(id)] = v
	}
	return nil
}

// stopStrings takes stop: a string or a list of them.
func (f *samplingFields) stopStrings(pl *plan, haveText bool) *apiError {
	if len(f.Stop) == 0 || string(f.Stop) == "null" {
		return nil
	}
	var one string
	if json.Unmarshal(f.Stop, &one) == nil {
		pl.stops = []string{one}
	} else if err := json.Unmarshal(f.Stop, &pl.stops); err != nil {
		return badRequest("stop", "must be a string or a list of strings")
	}
	if len(pl.stops) > MaxStops {
		return badRequest("stop", "%d strings, at most %d", len(pl.stops), MaxStops)
	}
	for i, s := range pl.stops {
		if s == "" || len(s) > MaxStopBytes {
			return badRequest("stop", "string %d must have 1 to %d bytes, has %d", i, MaxStopBytes, len(s))
		}
	}
	if len(pl.stops) > 0 && !haveText {
		return badRequest("stop", "stop strings need a tokenizer (start the gateway with --tokenizer); use stop_token_ids")
	}
	return nil
}

// fieldError turns a check's error into a 400 naming the field.
func fieldError(err error) *apiError {
	var fe *fielderr.Error
	if errors.As(err, &fe) {
		return badRequest(fe.Field, "%v", fe.Err)
	}
	return badRequest("", "%v", err)
}

// prompts parses a completion prompt: a string, a list of strings, a list
// of token IDs, or a list of lists of token IDs. Text needs encode.
func parsePrompts(raw json.RawMessage, encode func(string) ([]int32, error)) ([][]int32, *apiError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, badRequest("prompt", "is required")
	}
	var texts []string
	var one string
	if json.Unmarshal(raw, &one) == nil {
		texts = []string{one}
	} else if json.Unmarshal(raw, &texts) != nil {
		return tokenPrompts(raw)
	}
	if len(texts) == 0 {
		return nil, badRequest("prompt", "must not be empty")
	}
	if encode == nil {
		return nil, badRequest("prompt", "text prompts need a tokenizer (start the gateway with --tokenizer); send token IDs instead")
	}
	out := make([][]int32, len(texts))
	for i, t := range texts {
		if len(t) > MaxPromptBytes {
			return nil, badRequest("prompt", "prompt %d has %d bytes, at most %d", i, len(t), MaxPromptBytes)
		}
		ids, err := encode(t)
		if err != nil {
			return nil, badRequest("prompt", "prompt %d: %v", i, err)
		}
		if len(ids) == 0 {
			return nil, badRequest("prompt", "prompt %d encodes to no tokens", i)
		}
		out[i] = ids
	}
	return out, nil
}

func tokenPrompts(raw json.RawMessage) ([][]int32, *apiError) {
	var ids []int32
	if json.Unmarshal(raw, &ids) == nil {
		if len(ids) == 0 {
			return nil, badRequest("prompt", "must not be empty")
		}
		return [][]int32{ids}, nil
	}
	var lists [][]int32
	if err := json.Unmarshal(raw, &lists); err != nil {
		return nil, badRequest("prompt", "must be a string, a list of strings, a list of token IDs (int32) or a list of such lists")
	}
	if len(lists) == 0 {
		return nil, badRequest("prompt", "must not be empty")
	}
	for i, l := range lists {
		if len(l) == 0 {
			return nil, badRequest("prompt", "prompt %d is empty", i)
		}
	}
	return lists, nil
}

// completionPlan checks a /v1/completions request.
func (g *Gateway) completionPlan(req *completionRequest) (*plan, *apiError) {
	switch {
	case req.Echo:
		return nil, badRequest("echo", "not supported")
	case req.Suffix != nil && *req.Suffix != "":
		return nil, badRequest("suffix", "not supported")
	case req.BestOf != nil && (req.N == nil && *req.BestOf != 1 || req.N != nil && *req.BestOf != *req.N):
		return nil, badRequest("best_of", "only best_of = n is supported")
	}
	pl := &plan{promptParam: "prompt"}
	if e := req.sampling(pl, g.cfg.DefaultMaxTokens, g.tok != nil); e != nil {
		return nil, e
	}
	if e := g.structuredPlan(&req.samplingFields, pl); e != nil {
		return nil, e
	}
	if req.Logprobs != nil {
		if *req.Logprobs < 0 || *req.Logprobs > 20 {
			return nil, badRequest("logprobs", "must be in [0, 20], got %d", *req.Logprobs)
		}
		pl.logprobs, pl.base.Logprobs = req.Logprobs, req.Logprobs
	}
	var encode func(string) ([]int32, error)
	if g.tok != nil {
		encode = func(s string) ([]int32, error) { return g.tok.Encode(s, true) }
	}
	var e *apiError
	if pl.prompts, e = parsePrompts(req.Prompt, encode); e != nil {
		return nil, e
	}
	return pl, g.checkPlan(pl)
}

// checkPlan applies what every request shares: the model name, the
// fan-out bound and each NATS request's own check.
func (g *Gateway) checkPlan(pl *plan) *apiError {
	if e := g.checkModel(pl.model); e != nil {
		return e
	}
	if len(pl.prompts)*pl.n > MaxChoices {
		return badRequest("n", "%d prompts × n = %d choices, at most %d", len(pl.prompts), len(pl.prompts)*pl.n, MaxChoices)
	}
	for _, r := range pl.requests() {
		if err := r.Validate(math.MaxInt32); err != nil {
			return pl.requestParam(fieldError(err))
		}
	}
	return nil
}
