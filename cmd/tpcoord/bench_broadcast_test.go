package main

import (
	"bytes"
	"encoding/json"
	"io"
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"
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
		"--payload", "64", "--rounds", "1", "--json")
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
	var rs []benchBroadcastResult
	for i, line := range lines {
		var r benchBroadcastResult
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
		if r.TargetP50Ratio != bcTargetP50Ratio || r.TargetP99Ratio != bcTargetP99Ratio {
			t.Errorf("line %d: targets %v %v", i, r.TargetP50Ratio, r.TargetP99Ratio)
		}
		rs = append(rs, r)
	}
	for i := 0; i < len(rs); i += 2 {
		tcp, nr := rs[i], rs[i+1]
		p50, p99 := nr.P50US/tcp.P50US, nr.P99US/tcp.P99US
		for _, r := range []benchBroadcastResult{tcp, nr} {
			if r.P50RatioNATSTCP != p50 || r.P99RatioNATSTCP != p99 {
				t.Errorf("%s/%d: ratios %v %v, want %v %v", r.Transport, r.Followers, r.P50RatioNATSTCP, r.P99RatioNATSTCP, p50, p99)
			}
			if met := tcp.Lost+nr.Lost == 0 && p50 <= bcTargetP50Ratio && p99 <= bcTargetP99Ratio; r.TargetsMet != met {
				t.Errorf("%s/%d: targets_met %v, want %v", r.Transport, r.Followers, r.TargetsMet, met)
			}
		}
	}
}

func TestBenchBroadcastTable(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	out, err := runBenchBroadcastCmd(t, "--followers", "1", "--messages", "20", "--interval", "1ms", "--rounds", "2")
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
	} {
		_, err := runBenchBroadcastCmd(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("%v: error %v, want one naming %s", tc.args, err, tc.flag)
		}
	}
}

func TestBenchBroadcastFollowerBadFlags(t *testing.T) {
	ok := benchBroadcastFollowerOptions{transport: "tcp", addr: "127.0.0.1:1", messages: 10, deadline: 1}
	for _, tc := range []struct {
		edit func(*benchBroadcastFollowerOptions)
		flag string
	}{
		{func(o *benchBroadcastFollowerOptions) { o.transport = "udp" }, "--transport"},
		{func(o *benchBroadcastFollowerOptions) { o.addr = "" }, "--addr"},
		{func(o *benchBroadcastFollowerOptions) { o.transport = "nats" }, "--subject"},
		{func(o *benchBroadcastFollowerOptions) { o.messages = 0 }, "--messages"},
		{func(o *benchBroadcastFollowerOptions) { o.deadline = 0 }, "--deadline"},
	} {
		o := ok
		tc.edit(&o)
		err := runBenchBroadcastFollower(io.Discard, o)
		if err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("%+v: error %v, want one naming %s", o, err, tc.flag)
		}
	}
}

func TestBenchBroadcastPublisherBadFlags(t *testing.T) {
	ok := benchBroadcastPublisherOptions{transport: "tcp", followers: 1, payload: 64, interval: 1, messages: 10, subject: "s"}
	for _, tc := range []struct {
		edit func(*benchBroadcastPublisherOptions)
		flag string
	}{
		{func(o *benchBroadcastPublisherOptions) { o.transport = "udp" }, "--transport"},
		{func(o *benchBroadcastPublisherOptions) { o.followers = 0 }, "--followers"},
		{func(o *benchBroadcastPublisherOptions) { o.transport, o.subject = "nats", "" }, "--subject"},
		{func(o *benchBroadcastPublisherOptions) { o.payload = 8 }, "--payload"},
		{func(o *benchBroadcastPublisherOptions) { o.interval = 0 }, "--interval"},
		{func(o *benchBroadcastPublisherOptions) { o.messages = 0 }, "--messages"},
	} {
		o := ok
		tc.edit(&o)
		err := runBenchBroadcastPublisher(t.Context(), strings.NewReader(""), io.Discard, o)
		if err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("%+v: error %v, want one naming %s", o, err, tc.flag)
		}
	}
	// A publisher never told to go publishes nothing and says why.
	var out bytes.Buffer
	err := runBenchBroadcastPublisher(t.Context(), strings.NewReader("stop\n"), &out, ok)
	if err == nil || !strings.Contains(err.Error(), `"go"`) || !strings.HasPrefix(out.String(), "addr 127.0.0.1:") {
		t.Errorf("publisher told %q: err %v, output %q", "stop", err, out.String())
	}
}

// The reported figures are per-round medians, and the ratios the median of
// the per-round ratios (paired within a round), not a ratio of medians.
func TestSummarizeRounds(t *testing.T) {
	rs := []bcRound{
		{p50: 100, p90: 200, p99: 300, max: 900, lost: 1, samples: 40, sent: 1000, fcpu: 10, pcpu: 5},
		{p50: 300, p90: 400, p99: 500, max: 700, lost: 0, samples: 38, sent: 1002, fcpu: 30, pcpu: 7},
		{p50: 200, p90: 300, p99: 400, max: 800, lost: 2, samples: 40, sent: 1001, fcpu: 20, pcpu: 6},
	}
	r := summarize(rs)
	if r.P50US != 200 || r.P90US != 300 || r.P99US != 400 || r.MaxUS != 900 || r.Lost != 3 || r.Samples != 38 ||
		r.SentIntervalUS != 1001 || r.FollowerCPUUS != 20 || r.PublisherCPUUS != 6 {
		t.Errorf("summarize = %+v", r)
	}
	for _, tc := range []struct {
		v    []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{4, 1}, 2.5}, {[]float64{5, 1, 3}, 3}} {
		if got := median(tc.v); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.v, got, tc.want)
		}
	}
}

func TestBcRecorder(t *testing.T) {
	r := newBcRecorder(3)
	msg := make([]byte, bcHeaderLen)
	put := func(seq uint64, sentAt int64) []byte {
		for i := range 8 {
			msg[i] = byte(seq >> (8 * i))
			msg[8+i] = byte(uint64(sentAt) >> (8 * i))
		}
		return msg
	}
	if r.record(150, put(0, 100)) {
		t.Fatal("over after one message")
	}
	if r.record(170, put(0, 100)) { // a duplicate counts once
		t.Fatal("over after a duplicate")
	}
	if r.record(10, short(msg)) {
		t.Fatal("over after a short message")
	}
	if !r.record(400, put(bcEndSeq, 390)) {
		t.Fatal("end marker did not end the run")
	}
	if got := r.snapshot(); !slices.Equal(got, []int64{50, -1, -1}) {
		t.Fatalf("latencies %v", got)
	}
	select {
	case <-r.done:
	default:
		t.Fatal("done not closed")
	}
}

func short(b []byte) []byte { return b[:bcHeaderLen-1] }

func TestPct(t *testing.T) {
	v := []int64{10, 20, 30, 40, 50, 60, 70, 80, 90, 100}
	for _, tc := range []struct {
		q    float64
		want int64
	}{{0.5, 50}, {0.9, 90}, {0.99, 100}, {0.01, 10}, {1, 100}} {
		if got := pct(v, tc.q); got != tc.want {
			t.Errorf("pct(%v) = %d, want %d", tc.q, got, tc.want)
		}
	}
	if got := pct([]int64{7}, 0.99); got != 7 {
		t.Errorf("single value: %d", got)
	}
}

// With --server-in-publisher the publisher hosts the server (as rank 0
// under launch --nats-in-rank0) and every message still arrives.
func TestBenchBroadcastServerInPublisher(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	out, err := runBenchBroadcastCmd(t, "--followers", "2", "--messages", "30", "--interval", "1ms", "--rounds", "1", "--server-in-publisher", "--json")
	if err != nil {
		t.Fatalf("bench broadcast: %v\noutput:\n%s", err, out)
	}
	var n int
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var r benchBroadcastResult
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		if r.NATSServer != "in-publisher" || r.Lost != 0 || r.Samples != 2*(30-bcWarmup(30)) {
			t.Errorf("%s: server %q, lost %d, samples %d", r.Transport, r.NATSServer, r.Lost, r.Samples)
		}
		n++
	}
	if n != 2 {
		t.Fatalf("%d lines, want 2:\n%s", n, out)
	}
}
