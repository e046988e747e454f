// Package startup is `tpcoord bench launch`: how long a local job of N
// ranks takes from `tpcoord launch` to its ready file (every rank formed
// the world and reported ready on its heartbeat), and the CPU time and page
// faults the host spent on it, read from /proc at readiness.
package startup
