// Package core holds the decode loop's decisions, free of I/O: what every
// rank mirrors of the batch (Mirror, Seq), what rank 0 decides at each
// step boundary (Leader: which requests are queued, refused, cancelled or
// timed out, what the step carries, what each requester hears after a
// step; Scheduler beneath it), and what a rank knows of its peers (Peers:
// liveness, flow control, divergence).
//
// Nothing here reads a clock, touches the network or a file, or logs:
// time and input come in as arguments, and what to do comes back as
// values (Ready, Event), in the order to do it. Package rank's driver does
// the I/O. The imports enforce it (.golangci.yml, depguard), and the
// tests drive every decision with a fake clock, without sockets or sleeps,
// as raft's RawNode is driven through Step and Ready.
package core
