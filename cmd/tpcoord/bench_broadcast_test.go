//go:build !agentonly

package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/tpcoord/tpcoord/cmd/tpcoord/internal/bench/fanout"
)

func runBenchBroadcastCmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return execBench(t, newBenchBroadcastCmd(), args...)
}

// TestBenchBroadcastJSON runs the real thing with tiny sizes: follower
// processes, embedded NATS and the TCP fan-out. It checks counts and
// consistency only, never a time.
func TestBenchBroadcastJSON(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	const msgs, warm = 50, 2 // warm-up is 5%, at least 1
	out, err := runBenchBroadcastCmd(t, "--followers", "1,2", "--messages", "50", "--interval", "1ms",
		"--payload", "64", "--rounds", "1", "--json", "--transports", "nats,tcp")
	if err != nil {
		t.Fatalf("bench broadcast: %v\noutput:\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	want := []struct {
		transport string
		followers int
	}{{"tcp", 1}, {"nats", 1}, {"tcp", 2}, {"nats", 2}}
	if len(lines) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%s", len(lines), len(want), out)
	}
	var rs []fanout.Result
	for i, line := range lines {
		var r fanout.Result
		dec := json.NewDecoder(strings.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("line %d: %v: %s", i, err, line)
		}
		w := want[i]
		if r.Transport != w.transport || r.Followers != w.followers {
			t.Errorf("line %d: case %s/%d, want %s/%d", i, r.Transport, r.Followers, w.transport, w.followers)
		}
		if r.Messages != msgs || r.Warmup != warm || r.Payload != 64 || r.IntervalUS != 1000 || r.Rounds != 1 ||
			r.NATSServer != "own-process" || !r.TuneRuntime {
			t.Errorf("line %d: configuration %+v", i, r)
		}
		if r.Lost != 0 {
			t.Errorf("line %d: lost %d", i, r.Lost)
		}
		if r.Samples != w.followers*(msgs-warm) {
			t.Errorf("line %d: %d samples, want %d", i, r.Samples, w.followers*(msgs-warm))
		}
		if !(r.P50US > 0 && r.P50US <= r.P90US && r.P90US <= r.P99US && r.P99US <= r.MaxUS) {
			t.Errorf("line %d: percentiles out of order: p50 %v p90 %v p99 %v max %v", i, r.P50US, r.P90US, r.P99US, r.MaxUS)
		}
		if r.SentIntervalUS <= 0 {
			t.Errorf("line %d: sent_interval_us %v", i, r.SentIntervalUS)
		}
		if r.FollowerCPUUS <= 0 || r.PublisherCPUUS <= 0 || (r.Transport == "nats") != (r.ServerCPUUS > 0) {
			t.Errorf("line %d: CPU per message: followers %v, publisher %v, server %v", i, r.FollowerCPUUS, r.PublisherCPUUS, r.ServerCPUUS)
		}
		if r.CPU == "" || r.Cores < 1 || !strings.HasPrefix(r.Go, "go") {
			t.Errorf("line %d: machine %q %d %q", i, r.CPU, r.Cores, r.Go)
		}
		if r.TargetP50Ratio != fanout.TargetP50Ratio || r.TargetP99Ratio != fanout.TargetP99Ratio {
			t.Errorf("line %d: targets %v %v", i, r.TargetP50Ratio, r.TargetP99Ratio)
		}
		rs = append(rs, r)
	}
	for i := 0; i < len(rs); i += 2 {
		tcp, nr := rs[i], rs[i+1]
		p50, p99 := nr.P50US/tcp.P50US, nr.P99US/tcp.P99US
		for _, r := range []fanout.Result{tcp, nr} {
			if r.P50RatioNATSTCP != p50 || r.P99RatioNATSTCP != p99 {
				t.Errorf("%s/%d: ratios %v %v, want %v %v", r.Transport, r.Followers, r.P50RatioNATSTCP, r.P99RatioNATSTCP, p50, p99)
			}
			if met := tcp.Lost+nr.Lost == 0 && p50 <= fanout.TargetP50Ratio && p99 <= fanout.TargetP99Ratio; r.TargetsMet != met {
				t.Errorf("%s/%d: targets_met %v, want %v", r.Transport, r.Followers, r.TargetsMet, met)
			}
		}
	}
}

func TestBenchBroadcastTable(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	out, err := runBenchBroadcastCmd(t, "--followers", "1", "--messages", "20", "--interval", "1ms", "--rounds", "2", "--transports", "tcp,nats")
	if err != nil {
		t.Fatalf("bench broadcast: %v\noutput:\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.Contains(lines[1], "p99_us") ||
		!strings.HasPrefix(lines[2], "tcp ") || !strings.HasPrefix(lines[3], "nats ") {
		t.Fatalf("unexpected table:\n%s", out)
	}
}

func TestBenchBroadcastBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"--followers", "0"}, "--followers"},
		{[]string{"--followers", "1,65"}, "--followers"},
		{[]string{"--followers", "x"}, "--followers"},
		{[]string{"--payload", "15"}, "--payload"},
		{[]string{"--payload", "1048577"}, "--payload"},
		{[]string{"--messages", "9"}, "--messages"},
		{[]string{"--interval", "0s"}, "--interval"},
		{[]string{"--interval", "fast"}, "--interval"},
		{[]string{"--rounds", "0"}, "--rounds"},
		{[]string{"--rounds", "101"}, "--rounds"},
		{[]string{"--server-in-publisher", "--nats", "nats://127.0.0.1:4222"}, "--server-in-publisher"},
		{[]string{"--mac", "--payload", "20"}, "--payload"},
		{[]string{"--transports", "tcp,udp"}, "--transports"},
		{[]string{"--transports", "tcp,nats,tcp"}, "--transports"},
		{[]string{"--transports", "tcp,gloo", "--mac"}, "--mac"},
		{[]string{"--transports", "tcp,gloo", "--python", "/nonexistent/python3"}, "--python"},
		{[]string{"--transports", "tcp", "--python", "/nonexistent/python3", "--messages", "9"}, "--messages"},
	} {
		_, err := runBenchBroadcastCmd(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("%v: error %v, want one naming %s", tc.args, err, tc.flag)
		}
	}
}

// TestBenchBroadcastMAC: --mac adds a NATS case with a MAC on every
// message, after tcp and nats for each follower count; every message
// arrives and verifies (a follower that refused one fails the run).
func TestBenchBroadcastMAC(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	out, err := runBenchBroadcastCmd(t, "--followers", "2", "--messages", "30", "--interval", "1ms", "--rounds", "2", "--mac", "--json", "--transports", "tcp,nats")
	if err != nil {
		t.Fatalf("bench broadcast: %v\noutput:\n%s", err, out)
	}
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var r fanout.Result
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		got = append(got, fmt.Sprintf("%s/%v", r.Transport, r.MAC))
		if r.Lost != 0 || r.Samples != 2*(30-fanout.Warmup(30)) || r.P50RatioNATSTCP <= 0 || r.FollowerCPUUS <= 0 {
			t.Errorf("%s mac=%v: lost %d, samples %d, p50/tcp %v, follower CPU %v", r.Transport, r.MAC, r.Lost, r.Samples, r.P50RatioNATSTCP, r.FollowerCPUUS)
		}
	}
	if want := "tcp/false nats/false nats/true"; strings.Join(got, " ") != want {
		t.Fatalf("cases %v, want %s:\n%s", got, want, out)
	}
	table, err := runBenchBroadcastCmd(t, "--followers", "1", "--messages", "20", "--interval", "1ms", "--rounds", "1", "--mac", "--transports", "tcp,nats")
	if lines := strings.Split(strings.TrimSpace(table), "\n"); err != nil || len(lines) != 5 || !strings.HasPrefix(lines[4], "nats+mac ") {
		t.Fatalf("table: %v\n%s", err, table)
	}
}

// With --server-in-publisher the publisher hosts the server (as rank 0
// under launch --nats-in-rank0) and every message still arrives.
func TestBenchBroadcastServerInPublisher(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	out, err := runBenchBroadcastCmd(t, "--followers", "2", "--messages", "30", "--interval", "1ms", "--rounds", "1", "--server-in-publisher", "--json", "--transports", "tcp,nats")
	if err != nil {
		t.Fatalf("bench broadcast: %v\noutput:\n%s", err, out)
	}
	var n int
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var r fanout.Result
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		if r.NATSServer != "in-publisher" || r.Lost != 0 || r.Samples != 2*(30-fanout.Warmup(30)) {
			t.Errorf("%s: server %q, lost %d, samples %d", r.Transport, r.NATSServer, r.Lost, r.Samples)
		}
		n++
	}
	if n != 2 {
		t.Fatalf("%d lines, want 2:\n%s", n, out)
	}
}

// TestBenchBroadcastGloo runs all three transports tiny, gloo's processes
// under a Python with PyTorch: every gloo message reaches both followers,
// and its line has the other transports' schema and figures.
func TestBenchBroadcastGloo(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	py := torchPython(t)
	const msgs = 40
	out, err := runBenchBroadcastCmd(t, "--followers", "2", "--messages", "40", "--interval", "1ms", "--payload", "64",
		"--rounds", "1", "--json", "--python", py)
	if err != nil {
		t.Fatalf("bench broadcast: %v\noutput:\n%s", err, out)
	}
	var got []string
	for i, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var r fanout.Result
		dec := json.NewDecoder(strings.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("line %d: %v: %s", i, err, line)
		}
		got = append(got, r.Transport)
		if r.Followers != 2 || r.Messages != msgs || r.Payload != 64 || r.IntervalUS != 1000 || r.Lost != 0 ||
			r.Samples != 2*(msgs-fanout.Warmup(msgs)) {
			t.Errorf("%s: configuration or counts %+v", r.Transport, r)
		}
		if !(r.P50US > 0 && r.P50US <= r.P90US && r.P90US <= r.P99US && r.P99US <= r.MaxUS) {
			t.Errorf("%s: percentiles out of order: p50 %v p90 %v p99 %v max %v", r.Transport, r.P50US, r.P90US, r.P99US, r.MaxUS)
		}
		if r.SentIntervalUS <= 0 || r.FollowerCPUUS <= 0 || r.PublisherCPUUS <= 0 || r.P50RatioNATSTCP <= 0 {
			t.Errorf("%s: sent %v, CPU followers %v publisher %v, p50/tcp %v", r.Transport, r.SentIntervalUS, r.FollowerCPUUS, r.PublisherCPUUS, r.P50RatioNATSTCP)
		}
		if r.Transport == "gloo" && r.ServerCPUUS != 0 {
			t.Errorf("gloo: server CPU %v, want 0 (no server)", r.ServerCPUUS)
		}
	}
	if want := "tcp nats gloo"; strings.Join(got, " ") != want {
		t.Fatalf("cases %v, want %s:\n%s", got, want, out)
	}
}
