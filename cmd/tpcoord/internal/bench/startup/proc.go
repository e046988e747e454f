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

// usage sums the CPU time and minor faults of pids, each a live process.
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
		u.cpu += p.cpu
		u.minflt += p.minflt
	}
	return u, nil
}

// parseStat reads the minor faults and the user and system CPU time of a
// process and of its children it has waited for (launch's probe of the
// agent-only build: launch.AgentBinary) from the contents of a
// /proc/<pid>/stat file. The command name, in parentheses, may hold
// spaces and parentheses itself: fields are counted after its last ')'.
func parseStat(data []byte) (procUsage, error) {
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return procUsage{}, fmt.Errorf("no command name")
	}
	// After the name: state(0) ppid pgrp session tty_nr tpgid flags
	// minflt(7) cminflt(8) majflt cmajflt utime(11) stime(12) cutime(13)
	// cstime(14).
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 15 {
		return procUsage{}, fmt.Errorf("%d fields after the command name, want at least 15", len(f))
	}
	var v [6]int64
	for k, idx := range []int{7, 8, 11, 12, 13, 14} {
		n, err := strconv.ParseInt(f[idx], 10, 64)
		if err != nil || n < 0 || n > 1<<40 {
			return procUsage{}, fmt.Errorf("field %d: %q is not a count", idx+3, f[idx])
		}
		v[k] = n
	}
	return procUsage{minflt: v[0] + v[1], cpu: time.Duration(v[2]+v[3]+v[4]+v[5]) * clockTick}, nil
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
