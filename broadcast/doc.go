// Package broadcast owns the job's wire protocol: the binary Step and
// Heartbeat messages (explicit little-endian layout, CRC-32C, strict bounds
// checks), the subject names, and the Transport interface the decode loop
// talks through, with an in-memory Hub beside it for tests.
//
// The NATS implementation lives in broadcast/natsbus so that this package,
// and the rank state machine that uses its types, import no network code.
// docs/protocol.md describes the layout byte by byte.
package broadcast
