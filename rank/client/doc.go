// Package client is the requester's side of a job's request API: the JSON
// messages exchanged on tpc.<job>.generate, .client and .status
// (GenerateRequest, GenerateReply, RankStatus, ...), Generate and Stream,
// which submit a request and stream its tokens while keeping it alive, Mux,
// which does the same for many requests on one reply subscription (a
// long-running client such as the HTTP gateway), and CollectStatus.
//
// It depends on broadcast (the transport) and sampler (the sampling
// parameters) only, so a client binary does not carry the agent's
// telemetry stack: a caller that traces passes its trace context as
// message headers with WithHeader. Rank 0's side of the same messages is in
// package rank.
package client
