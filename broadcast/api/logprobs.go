package api

// TokenLogprob is one token's log-probability.
type TokenLogprob struct {
	Token   int32   `json:"token"`
	Logprob float32 `json:"logprob"`
}

// Logprobs is the log-probability of a sampled token and the row's top
// tokens, for OpenAI-style logprobs output.
type Logprobs struct {
	Token   int32   `json:"token"`
	Logprob float32 `json:"logprob"`
	// Rank is 1 + the number of tokens strictly more likely than Token.
	Rank int `json:"rank"`
	// Top holds the n most likely tokens, most likely first (ties by index).
	Top []TokenLogprob `json:"top"`
}
