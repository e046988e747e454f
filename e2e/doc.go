// Package e2e holds end-to-end tests: they build the tpcoord binary and run
// real processes against a real (embedded) NATS server and real memberlist
// sockets on loopback. Deadlines are generous and nothing asserts a time
// beyond what an issue promises, since many processes share two cores.
package e2e
