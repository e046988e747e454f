// Package broadcast owns the job's wire protocol: the binary Step,
// Heartbeat and replay messages (explicit little-endian layout, a MAC under
// the job's key, CRC-32C, strict bounds checks) and the Codec that seals
// and checks them, the job key and its file, the subject names, and the
// Transport interface the decode loop talks through, with an in-memory Hub
// beside it for tests.
//
// The NATS implementation lives in broadcast/natsbus so that this package,
// and the rank state machine that uses its types, import no network code.
// docs/protocol.md describes the layout byte by byte.
package broadcast
