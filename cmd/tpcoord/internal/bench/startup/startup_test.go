package startup

import (
	"os"
	"strings"
	"testing"
	"time"
)

func TestParseStat(t *testing.T) {
	// A command name with spaces and parentheses: fields count after the
	// last ')'.
	// Reaped children's faults and CPU (cminflt, cutime, cstime) count.
	line := "4242 (tp (c) oord) S 1 4242 4242 0 -1 4194560 1234 66 5 0 17 3 4 2 20 0 9 0 100 2000000 300 18446744073709551615\n"
	u, err := parseStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if u.minflt != 1300 || u.self != 20*clockTick || u.children != 6*clockTick {
		t.Errorf("got minflt %d, cpu %v + children's %v; want 1300, %v + %v", u.minflt, u.self, u.children, 20*clockTick, 6*clockTick)
	}
	for _, bad := range []string{
		"4242 tpcoord S 1", // no parentheses
		"4242 (tpcoord) S 1 4242 4242 0 -1 4194560 1 0 5 0 17 3 0",    // too few fields
		"4242 (tpcoord) S 1 4242 4242 0 -1 4194560 x 0 5 0 17 3 0 0",  // minflt not a number
		"4242 (tpcoord) S 1 4242 4242 0 -1 4194560 1 0 5 0 -17 3 0 0", // negative utime
		"4242 (tpcoord) S 1 4242 4242 0 -1 4194560 1 0 5 0 17 3 0 -1", // negative cstime
		"4242 (tpcoord) S 1 4242 4242 0 -1 4194560 1 0 5 0 99999999999999999999 3 0 0",
	} {
		if _, err := parseStat([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestParseSchedstat: a thread's time on the CPU, in nanoseconds.
func TestParseSchedstat(t *testing.T) {
	if ns, err := parseSchedstat([]byte("70086 63501 2\n")); err != nil || ns != 70086 {
		t.Errorf("got %v, %v; want 70.086µs", ns, err)
	}
	for _, bad := range []string{"", "x 1 2", "-5 1 2"} {
		if _, err := parseSchedstat([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestThreadsCPU: this process's threads ran for some nanoseconds, which
// stat's 10 ms ticks may round to nothing.
func TestThreadsCPU(t *testing.T) {
	ns, err := threadsCPU(os.Getpid())
	if err != nil {
		t.Skipf("no schedstat here: %v", err)
	}
	if ns <= 0 {
		t.Errorf("this process's threads ran %v", ns)
	}
}

func TestSummarize(t *testing.T) {
	runs := []Sample{
		{ReadyS: 3.5, CPUS: 6.5, Procs: 65, FaultsPerProc: 2000},
		{ReadyS: 2.5, CPUS: 5.2, Procs: 65, FaultsPerProc: 1900},
		{ReadyS: 2.9, CPUS: 5.85, Procs: 65, FaultsPerProc: 2100},
	}
	r := summarize(TargetNProc, runs)
	if r.ReadyP50S != 2.9 || r.CPUP50S != 5.85 || r.FaultsPerProcP50 != 2000 || r.CPUPerProcP50MS != 90 {
		t.Errorf("medians %+v", r)
	}
	if r.TargetMet == nil || !*r.TargetMet || r.TargetS != TargetS {
		t.Errorf("target %v %v, want met at %v", r.TargetS, r.TargetMet, TargetS)
	}
	runs[2].ReadyS = 3.01
	if r := summarize(TargetNProc, runs); r.TargetMet == nil || *r.TargetMet {
		t.Errorf("median 3.01 s met the target")
	}
	if r := summarize(16, runs); r.TargetMet != nil || r.TargetS != 0 {
		t.Errorf("nproc 16 carries the target: %+v", r)
	}
}

func TestValidate(t *testing.T) {
	ok := Options{NProc: []int{2}, Runs: 1, Timeout: time.Minute}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		o    Options
		flag string
	}{
		{Options{Runs: 1, Timeout: time.Minute}, "--nproc"},
		{Options{NProc: []int{2, 0}, Runs: 1, Timeout: time.Minute}, "--nproc"},
		{Options{NProc: []int{2}, Runs: 101, Timeout: time.Minute}, "--runs"},
		{Options{NProc: []int{2}, Runs: 1}, "--timeout"},
		{Options{NProc: []int{2}, Runs: 1, Timeout: time.Minute, Args: []string{"--vocab", "64", "--nproc=4"}}, "--nproc is the bench's own"},
		{Options{NProc: []int{2}, Runs: 1, Timeout: time.Minute, Args: []string{"--ready-file", "x"}}, "--ready-file"},
	} {
		if err := tc.o.Validate(); err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("%+v: %v, want an error naming %s", tc.o, err, tc.flag)
		}
	}
}
