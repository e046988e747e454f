// Package serve is `tpcoord bench serve`: what the HTTP gateway
// (coordinator/gateway) costs against sending the same requests straight
// over NATS. It starts a local job (`tpcoord launch`, from Options.Self)
// and a gateway in this process on loopback, then runs alternating rounds
// of concurrent streaming clients over HTTP (/v1/completions, SSE) and over
// NATS (rank/client.Stream) with identical requests, and reports time to
// first token, inter-token latency and output tokens/s of each path.
package serve
