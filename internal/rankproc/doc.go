// Package rankproc owns how a process that shares its host with the other
// ranks of a job is started: the Go runtime settings of such a process
// (Env for a child, TuneSelf for the running process) and a child's death
// with its parent (DieWithParent). launch applies it to the ranks it
// starts and to itself; the benchmarks apply it to the processes that
// stand in for ranks. It does not start processes.
package rankproc
