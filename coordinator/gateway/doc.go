// Package gateway is tpcoord's OpenAI-compatible HTTP front door: it turns
// /v1/completions and /v1/chat/completions requests into the job's NATS
// generate requests (rank/client), streams the tokens back as server-sent
// events, turns token IDs into text through an optional tokenizer, and
// measures what a client sees in vLLM's metric vocabulary.
//
// A gateway holds no job state: any number of them can serve one job, on
// any host of its bus. Each HTTP request is one or more NATS requests (one
// per prompt and choice); a client that goes away cancels them at once.
package gateway
