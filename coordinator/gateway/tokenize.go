package gateway

import (
	"fmt"
	"net/http"

	"github.com/tpcoord/tpcoord/internal/buildinfo"
)

// tokenizeRequest is the body of POST /tokenize, vLLM's: a completion's
// prompt, or a chat's messages rendered by the chat template.
type tokenizeRequest struct {
	Model    string          `json:"model"`
	Prompt   *string         `json:"prompt"`
	Messages []chatMessageIn `json:"messages"`
	// AddGenerationPrompt (chat only, default true) ends the prompt with
	// the template's assistant opening.
	AddGenerationPrompt *bool `json:"add_generation_prompt"`
	// AddSpecialTokens adds what the tokenizer adds around a sequence
	// (BOS, for most): default true for a prompt, false for a chat, whose
	// template writes them.
	AddSpecialTokens *bool `json:"add_special_tokens"`
}

// tokenizeResponse is vLLM's answer to /tokenize. MaxModelLen is
// Gateway.maxModelLen: 0 when the gateway does not know the job's bound.
type tokenizeResponse struct {
	Count       int     `json:"count"`
	MaxModelLen int     `json:"max_model_len"`
	Tokens      []int32 `json:"tokens"`
}

// detokenizeRequest is the body of POST /detokenize, vLLM's.
type detokenizeRequest struct {
	Model  string  `json:"model"`
	Tokens []int32 `json:"tokens"`
}

type detokenizeResponse struct {
	Prompt string `json:"prompt"`
}

// needTokenizer refuses a request that needs text when the gateway has no
// tokenizer.
func (g *Gateway) needTokenizer() *apiError {
	if g.tok != nil {
		return nil
	}
	return &apiError{Status: http.StatusBadRequest, Message: "this gateway has no tokenizer configured (start it with --tokenizer)",
		Type: "invalid_request_error", Code: "no_tokenizer"}
}

// checkModel refuses a model other than the one served ("" is it).
func (g *Gateway) checkModel(model string) *apiError {
	if model == g.cfg.Model || model == "" {
		return nil
	}
	return &apiError{Status: http.StatusNotFound, Message: fmt.Sprintf("the model `%s` does not exist; this server serves `%s`", model, g.cfg.Model),
		Type: "invalid_request_error", Param: "model", Code: "model_not_found"}
}

func (g *Gateway) handleTokenize(w http.ResponseWriter, r *http.Request) {
	var req tokenizeRequest
	ignored, e := decodeStrict(r.Body, &req)
	g.noteIgnored(w, r, ignored)
	var ids []int32
	if e == nil {
		ids, e = g.tokenize(&req)
	}
	if e != nil {
		g.refuse(w, r, e)
		return
	}
	writeJSON(w, http.StatusOK, tokenizeResponse{Count: len(ids), MaxModelLen: g.maxModelLen(), Tokens: ids})
}

// maxModelLen is the job's bound on a request's tokens: the configured
// one, else what rank 0 last reported (0: not known, or no bound).
func (g *Gateway) maxModelLen() int {
	if g.cfg.MaxModelLen > 0 {
		return g.cfg.MaxModelLen
	}
	if st := g.metrics.job.rank0(); st != nil {
		return st.MaxModelLen
	}
	return 0
}

// tokenize checks a /tokenize request and encodes its text.
func (g *Gateway) tokenize(req *tokenizeRequest) ([]int32, *apiError) {
	if e := g.checkModel(req.Model); e != nil {
		return nil, e
	}
	if e := g.needTokenizer(); e != nil {
		return nil, e
	}
	chat := req.Messages != nil
	addSpecial := !chat
	if req.AddSpecialTokens != nil {
		addSpecial = *req.AddSpecialTokens
	}
	switch {
	case chat && req.Prompt != nil:
		return nil, badRequest("messages", "give prompt or messages, not both")
	case chat:
		if e := g.needChatTemplate("tokenize a prompt instead"); e != nil {
			return nil, e
		}
		ids, e := g.encodeChat(req.Messages, nil, req.AddGenerationPrompt == nil || *req.AddGenerationPrompt, addSpecial)
		return nonNil(ids), e
	case req.Prompt == nil:
		return nil, badRequest("prompt", "is required (or messages, for a chat)")
	case req.AddGenerationPrompt != nil:
		return nil, badRequest("add_generation_prompt", "only with messages")
	case len(*req.Prompt) > MaxPromptBytes:
		return nil, badRequest("prompt", "%d bytes, at most %d", len(*req.Prompt), MaxPromptBytes)
	}
	ids, err := g.tok.Encode(*req.Prompt, addSpecial)
	if err != nil {
		return nil, badRequest("prompt", "the tokenizer refused it: %v", err)
	}
	return nonNil(ids), nil
}

func (g *Gateway) handleDetokenize(w http.ResponseWriter, r *http.Request) {
	var req detokenizeRequest
	ignored, e := decodeStrict(r.Body, &req)
	g.noteIgnored(w, r, ignored)
	if e == nil {
		e = g.checkModel(req.Model)
	}
	if e == nil {
		e = g.needTokenizer()
	}
	if e == nil && req.Tokens == nil {
		e = badRequest("tokens", "is required")
	}
	for i, id := range req.Tokens {
		if e != nil {
			break
		}
		if id < 0 || int(id) >= g.tok.VocabSize() {
			e = badRequest("tokens", "token %d (index %d) is out of the vocabulary [0, %d)", id, i, g.tok.VocabSize())
		}
	}
	if e != nil {
		g.refuse(w, r, e)
		return
	}
	text, err := g.tok.Decode(req.Tokens)
	if err != nil {
		g.refuse(w, r, badRequest("tokens", "the tokenizer refused them: %v", err))
		return
	}
	writeJSON(w, http.StatusOK, detokenizeResponse{Prompt: text})
}

// handleVersion answers vLLM's /version: the gateway's build.
func (g *Gateway) handleVersion(w http.ResponseWriter, _ *http.Request) {
	v := g.version
	if v == "" {
		v = buildinfo.Get().Version
	}
	writeJSON(w, http.StatusOK, struct {
		Version string `json:"version"`
	}{v})
}
