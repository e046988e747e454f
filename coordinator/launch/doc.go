// Package launch runs a whole job on one host: it starts (or uses) a NATS
// server, spawns one agent process per rank, watches their heartbeats until
// every rank is ready, writes the ready file, and supervises them: a rank
// that dies stops the job, naming it. Every way out goes through one stop
// path (Supervisor.stop) that tells the ranks why, signals them, waits a
// grace period and kills what is left.
//
// It does not parse flags or handle signals: cmd/tpcoord builds the Config
// (including each rank's command-line arguments and environment) and
// cancels Run's context on SIGINT/SIGTERM.
package launch
