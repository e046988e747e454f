// Package job starts the tpcoord processes a benchmark needs from the
// tpcoord binary it is given: any child process (Command, marked with
// RunAsTPCoordEnv), and a local job run by `tpcoord launch` (Start), to
// which it submits batches of requests and whose rank 0 it asks for its
// step timings. bench e2e and bench step share it. It does not measure
// anything itself.
package job
