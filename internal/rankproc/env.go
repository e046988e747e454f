package rankproc

import (
	"runtime"
	"strconv"
	"strings"
)

// sysmonSetting keeps the Go runtime's sysmon thread out of its deep sleep.
// A rank is idle between steps. With every P idle, sysmon parks on a futex,
// and the first system call after the next wake-up, the read of the step
// message, has to wake it: one more thread wake-up on the receive path of
// every rank at every step, followed by a run of 20 µs polls. A positive
// schedtrace is the runtime's only switch that keeps sysmon polling
// instead, backing off to one poll per 10 ms while idle. The trace period
// is the largest the runtime takes (2^31-1 ms, 24.8 days), counted from
// the host's boot: on a host up for longer, the process prints one SCHED
// line to stderr at start and one every 24.8 days (docs/operations.md).
// Measured in docs/benchmarks-broadcast.md.
const sysmonSetting = "schedtrace=2147483647"

// hostProcs is the runtime's own GOMAXPROCS at start, before TuneSelf
// lowers it: the CPUs this process may use, cgroup CPU limits included
// (runtime.NumCPU ignores those).
var hostProcs = runtime.GOMAXPROCS(0)

// Env is the environment of one rank process that launch (or a bench that
// stands in for it) starts on a host shared by nproc ranks, from base
// (which is not modified). With tune, every rank gets sysmonSetting in
// GODEBUG and a GOMAXPROCS of its share of the cores, at least 1: with
// more Ps than the cores a process gets to run on, every hand-off between
// its goroutines (nats.go's read loop to a subscription's goroutine, the
// embedded server's read loop to its per-connection write loops) wakes
// another thread, which the host pays for in CPU and the step in latency.
// Settings already in base (GOMAXPROCS, a schedtrace in GODEBUG) are left
// as they are.
func Env(base []string, nproc int, tune bool) []string {
	env := append([]string(nil), base...)
	if !tune {
		return env
	}
	godebug, hasGodebug, hasProcs := "", false, false
	for _, kv := range env {
		switch {
		case strings.HasPrefix(kv, "GODEBUG="):
			godebug, hasGodebug = strings.TrimPrefix(kv, "GODEBUG="), true
		case strings.HasPrefix(kv, "GOMAXPROCS="):
			hasProcs = true
		}
	}
	if !GodebugHas(godebug, "schedtrace") {
		if hasGodebug {
			env = withoutVar(env, "GODEBUG")
		}
		env = append(env, "GODEBUG="+withSysmon(godebug))
	}
	if !hasProcs {
		env = append(env, "GOMAXPROCS="+strconv.Itoa(share(nproc)))
	}
	return env
}

// GodebugHas reports whether the GODEBUG value godebug sets key.
func GodebugHas(godebug, key string) bool {
	for kv := range strings.SplitSeq(godebug, ",") {
		if k, _, _ := strings.Cut(strings.TrimSpace(kv), "="); k == key {
			return true
		}
	}
	return false
}

// withSysmon is godebug with sysmonSetting added.
func withSysmon(godebug string) string {
	if godebug == "" {
		return sysmonSetting
	}
	return godebug + "," + sysmonSetting
}

// share is the GOMAXPROCS of one of procs processes sharing the host.
func share(procs int) int { return max(1, hostProcs/max(1, procs)) }

// withoutVar drops name from env, in place.
func withoutVar(env []string, name string) []string {
	out := env[:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return out
}
