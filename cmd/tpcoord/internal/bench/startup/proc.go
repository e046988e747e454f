package startup

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTick is the unit of utime and stime in /proc/<pid>/stat: USER_HZ,
// 100 on every Linux architecture Go runs on (amd64, arm64, s390x,
// ppc64le included).
const clockTick = 10 * time.Millisecond

// procUsage is what processes used, from /proc.
type procUsage struct {
	cpu    time.Duration // user + system
	minflt int64         // minor page faults
}

// procStat is what /proc/<pid>/stat says of a process: its minor faults
// and CPU time, its own and its reaped children's (launch's probe of the
// agent-only build: launch.AgentBinary), in whole clock ticks.
type procStat struct {
	minflt         int64
	self, children time.Duration
}

// usage sums the CPU time and minor faults of pids, each a live process.
// A process's own CPU time is its threads' from schedstat, in
// nanoseconds: /proc/<pid>/stat truncates each process's to 10 ms, and a
// rank ready in 20 ms used less than that (its stat said 0). Where
// schedstat is missing (a kernel without it) stat's ticks are used.
func usage(pids []int) (procUsage, error) {
	var u procUsage
	for _, pid := range pids {
		data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return procUsage{}, err
		}
		p, err := parseStat(data)
		if err != nil {
			return procUsage{}, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		self, err := threadsCPU(pid)
		if err != nil {
			self = p.self
		}
		u.cpu += self + p.children
		u.minflt += p.minflt
	}
	return u, nil
}

// threadsCPU is the time pid's live threads ran, from the first field of
// each /proc/<pid>/task/<tid>/schedstat (nanoseconds on the CPU).
func threadsCPU(pid int) (time.Duration, error) {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var sum time.Duration
	for _, t := range tasks {
		data, err := os.ReadFile(dir + "/" + t.Name() + "/schedstat")
		if err != nil {
			return 0, err
		}
		ns, err := parseSchedstat(data)
		if err != nil {
			return 0, fmt.Errorf("%s/%s/schedstat: %w", dir, t.Name(), err)
		}
		sum += ns
	}
	return sum, nil
}

// parseSchedstat reads the time on the CPU from a schedstat file: its
// first field, in nanoseconds.
func parseSchedstat(data []byte) (time.Duration, error) {
	f := strings.Fields(string(data))
	if len(f) == 0 {
		return 0, fmt.Errorf("empty")
	}
	ns, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil || ns < 0 {
		return 0, fmt.Errorf("%q is not a time in ns", f[0])
	}
	return time.Duration(ns), nil
}

// parseStat reads the minor faults and the user and system CPU time of a
// process and of its children it has waited for from the contents of a
// /proc/<pid>/stat file. The command name, in parentheses, may hold
// spaces and parentheses itself: fields are counted after its last ')'.
func parseStat(data []byte) (procStat, error) {
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("no command name")
	}
	// After the name: state(0) ppid pgrp session tty_nr tpgid flags
	// minflt(7) cminflt(8) majflt cmajflt utime(11) stime(12) cutime(13)
	// cstime(14).
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 15 {
		return procStat{}, fmt.Errorf("%d fields after the command name, want at least 15", len(f))
	}
	var v [6]int64
	for k, idx := range []int{7, 8, 11, 12, 13, 14} {
		n, err := strconv.ParseInt(f[idx], 10, 64)
		if err != nil || n < 0 || n > 1<<40 {
			return procStat{}, fmt.Errorf("field %d: %q is not a count", idx+3, f[idx])
		}
		v[k] = n
	}
	return procStat{minflt: v[0] + v[1], self: time.Duration(v[2]+v[3]) * clockTick, children: time.Duration(v[4]+v[5]) * clockTick}, nil
}

// loadAvg is the host's 1-minute load average, or 0 where /proc has none.
func loadAvg() float64 {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(data))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}
