// Package api holds the request API's types, shared by the requesters
// (rank/client, the HTTP gateway, launch) and rank 0: the JSON messages on
// tpc.<job>.generate, .client, .status and .control (GenerateRequest,
// GenerateReply, RankStatus, Control, ...), a request's sampling
// parameters (Params, as vLLM's SamplingParams) and the logprobs it gets
// back, with their validation.
//
// It is a leaf: it imports nothing of tpcoord but internal/ leaves, so a
// client links neither the decode loop, the sampler nor the noise pool.
package api
