package fanout

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tpcoord/tpcoord/broadcast"
)

func TestOptionsValidate(t *testing.T) {
	ok := Options{Self: "/bin/tpcoord", Followers: []int{1, 8}, Payload: 256, Interval: time.Millisecond, Messages: 50, Rounds: 3}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid options: %v", err)
	}
	for _, tc := range []struct {
		edit func(*Options)
		flag string
	}{
		{func(o *Options) { o.Followers = nil }, "--followers"},
		{func(o *Options) { o.Followers = []int{1, 65} }, "--followers"},
		{func(o *Options) { o.Payload = 15 }, "--payload"},
		{func(o *Options) { o.Payload = 1<<20 + 1 }, "--payload"},
		{func(o *Options) { o.Payload, o.MAC = 31, true }, "--payload"},
		{func(o *Options) { o.Interval = 0 }, "--interval"},
		{func(o *Options) { o.Messages = 9 }, "--messages"},
		{func(o *Options) { o.Rounds = 0 }, "--rounds"},
		{func(o *Options) { o.Rounds = 101 }, "--rounds"},
		{func(o *Options) { o.ServerInPublisher, o.NATSURL = true, "nats://127.0.0.1:4222" }, "--server-in-publisher"},
		{func(o *Options) { o.Self = "" }, "Self"},
		{func(o *Options) { o.Transports = []string{"tcp", "mpi"} }, "--transports"},
		{func(o *Options) { o.Transports = []string{"gloo", "tcp", "gloo"} }, "--transports"},
		{func(o *Options) { o.Transports, o.MAC = []string{"tcp", "gloo"}, true }, "--mac"},
	} {
		o := ok
		o.Followers = slices.Clone(ok.Followers)
		tc.edit(&o)
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("%+v: error %v, want one naming %s", o, err, tc.flag)
		}
	}
}

// A round's cases are in one order whatever the order of --transports:
// tcp first (the others' ratios divide by it); no --transports is tcp and
// nats.
func TestKinds(t *testing.T) {
	for _, tc := range []struct {
		transports []string
		mac        bool
		want       string
	}{
		{nil, false, "tcp nats"},
		{nil, true, "tcp nats nats+mac"},
		{[]string{"gloo", "nats", "tcp"}, true, "tcp nats nats+mac gloo"},
		{[]string{"gloo"}, false, "gloo"},
		{[]string{"nats", "gloo"}, false, "nats gloo"},
	} {
		var got []string
		for _, k := range (Options{Transports: tc.transports, MAC: tc.mac}).kinds() {
			got = append(got, k.String())
		}
		if strings.Join(got, " ") != tc.want {
			t.Errorf("%v mac=%v: cases %v, want %s", tc.transports, tc.mac, got, tc.want)
		}
	}
}

func TestFollowerBadFlags(t *testing.T) {
	ok := FollowerOptions{Transport: "tcp", Addr: "127.0.0.1:1", Messages: 10, Deadline: 1}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid options: %v", err)
	}
	for _, tc := range []struct {
		edit func(*FollowerOptions)
		flag string
	}{
		{func(o *FollowerOptions) { o.Transport = "udp" }, "--transport"},
		{func(o *FollowerOptions) { o.Addr = "" }, "--addr"},
		{func(o *FollowerOptions) { o.Transport = "nats" }, "--subject"},
		{func(o *FollowerOptions) { o.Messages = 0 }, "--messages"},
		{func(o *FollowerOptions) { o.Deadline = 0 }, "--deadline"},
	} {
		o := ok
		tc.edit(&o)
		var out bytes.Buffer
		err := RunFollower(t.Context(), &out, o)
		if err == nil || !strings.HasPrefix(err.Error(), tc.flag) {
			t.Errorf("%+v: error %v, want one naming %s", o, err, tc.flag)
		}
		if out.Len() != 0 {
			t.Errorf("%+v: printed %q before failing", o, out.String())
		}
	}
}

func TestPublisherBadFlags(t *testing.T) {
	ok := PublisherOptions{Transport: "tcp", Followers: 1, Payload: 64, Interval: 1, Messages: 10, Subject: "s"}
	for _, tc := range []struct {
		edit func(*PublisherOptions)
		flag string
	}{
		{func(o *PublisherOptions) { o.Transport = "udp" }, "--transport"},
		{func(o *PublisherOptions) { o.Followers = 0 }, "--followers"},
		{func(o *PublisherOptions) { o.Transport, o.Subject = "nats", "" }, "--subject"},
		{func(o *PublisherOptions) { o.Payload = 8 }, "--payload"},
		{func(o *PublisherOptions) { o.Payload, o.JobKeyFile = 31, "/k" }, "--payload"},
		{func(o *PublisherOptions) { o.Interval = 0 }, "--interval"},
		{func(o *PublisherOptions) { o.Messages = 0 }, "--messages"},
	} {
		o := ok
		tc.edit(&o)
		err := RunPublisher(t.Context(), strings.NewReader(""), &bytes.Buffer{}, o)
		if err == nil || !strings.HasPrefix(err.Error(), tc.flag) {
			t.Errorf("%+v: error %v, want one naming %s", o, err, tc.flag)
		}
	}
	// A publisher never told to go publishes nothing and says why.
	var out bytes.Buffer
	err := RunPublisher(t.Context(), strings.NewReader("stop\n"), &out, ok)
	if err == nil || !strings.Contains(err.Error(), `"go"`) || !strings.HasPrefix(out.String(), "addr 127.0.0.1:") {
		t.Errorf("publisher told %q: err %v, output %q", "stop", err, out.String())
	}
}

// The reported figures are per-round medians, and the ratios the median of
// the per-round ratios (paired within a round), not a ratio of medians.
func TestSummarizeRounds(t *testing.T) {
	rs := []round{
		{p50: 100, p90: 200, p99: 300, max: 900, lost: 1, samples: 40, sent: 1000, fcpu: 10, pcpu: 5},
		{p50: 300, p90: 400, p99: 500, max: 700, lost: 0, samples: 38, sent: 1002, fcpu: 30, pcpu: 7},
		{p50: 200, p90: 300, p99: 400, max: 800, lost: 2, samples: 40, sent: 1001, fcpu: 20, pcpu: 6},
	}
	r := summarize(rs)
	if r.P50US != 200 || r.P90US != 300 || r.P99US != 400 || r.MaxUS != 900 || r.Lost != 3 || r.Samples != 38 ||
		r.SentIntervalUS != 1001 || r.FollowerCPUUS != 20 || r.PublisherCPUUS != 6 {
		t.Errorf("summarize = %+v", r)
	}
}

func TestResultsPairRatiosWithinRounds(t *testing.T) {
	o := Options{Payload: 64, Interval: time.Millisecond, Messages: 100, Rounds: 2}
	tcp := []round{{p50: 10, p99: 20}, {p50: 40, p99: 40}}
	nats := []round{{p50: 20, p99: 20}, {p50: 40, p99: 80}}
	// Ratios per round: p50 2 and 1, p99 1 and 2; medians 1.5 and 1.5.
	// A ratio of the medians would give p50 30/25.
	for _, r := range results(o, 4, [][]round{tcp, nats}) {
		if r.P50RatioNATSTCP != 1.5 || r.P99RatioNATSTCP != 1.5 || !r.TargetsMet {
			t.Errorf("%s: ratios %v %v, targets met %v", r.Transport, r.P50RatioNATSTCP, r.P99RatioNATSTCP, r.TargetsMet)
		}
		if r.Followers != 4 || r.Warmup != 5 || r.IntervalUS != 1000 || r.NATSServer != "own-process" {
			t.Errorf("%s: configuration %+v", r.Transport, r)
		}
	}
	nats[1].lost = 1
	if r := results(o, 4, [][]round{tcp, nats}); r[0].TargetsMet || r[1].TargetsMet {
		t.Error("targets met with a lost message")
	}

	// With --mac a third line, its ratios over tcp within each round; the
	// tcp line keeps NATS's without a MAC.
	o.MAC = true
	nats[1].lost = 0
	mac := []round{{p50: 30, p99: 20}, {p50: 40, p99: 120}} // p50 3 and 1, p99 1 and 3
	rs := results(o, 4, [][]round{tcp, nats, mac})
	if len(rs) != 3 || rs[2].Transport != "nats" || !rs[2].MAC || rs[1].MAC || rs[0].MAC {
		t.Fatalf("cases %+v", rs)
	}
	if rs[2].P50RatioNATSTCP != 2 || rs[2].P99RatioNATSTCP != 2 || rs[0].P50RatioNATSTCP != 1.5 || rs[1].P50RatioNATSTCP != 1.5 {
		t.Errorf("ratios: tcp %v, nats %v, nats+mac %v %v", rs[0].P50RatioNATSTCP, rs[1].P50RatioNATSTCP, rs[2].P50RatioNATSTCP, rs[2].P99RatioNATSTCP)
	}
}

// The gloo line's ratios are its own over tcp in each round; without tcp
// there are none, and without nats the tcp line has none.
func TestResultsGloo(t *testing.T) {
	o := Options{Payload: 64, Interval: time.Millisecond, Messages: 100, Rounds: 2, Transports: []string{"tcp", "gloo"}}
	tcp := []round{{p50: 10, p99: 20}, {p50: 40, p99: 40}}
	gloo := []round{{p50: 40, p99: 40}, {p50: 80, p99: 160}} // p50 4 and 2, p99 2 and 4
	rs := results(o, 2, [][]round{tcp, gloo})
	if len(rs) != 2 || rs[0].Transport != "tcp" || rs[1].Transport != "gloo" {
		t.Fatalf("cases %+v", rs)
	}
	if rs[1].P50RatioNATSTCP != 3 || rs[1].P99RatioNATSTCP != 3 || rs[1].TargetsMet {
		t.Errorf("gloo: ratios %v %v, targets met %v", rs[1].P50RatioNATSTCP, rs[1].P99RatioNATSTCP, rs[1].TargetsMet)
	}
	if rs[0].P50RatioNATSTCP != 0 || rs[0].TargetsMet {
		t.Errorf("tcp without nats: ratio %v, targets met %v", rs[0].P50RatioNATSTCP, rs[0].TargetsMet)
	}
	o.Transports = []string{"gloo"}
	if rs := results(o, 2, [][]round{gloo}); len(rs) != 1 || rs[0].P50RatioNATSTCP != 0 || rs[0].P50US != 60 {
		t.Errorf("gloo alone: %+v", rs)
	}
}

// TestRecorderVerifiesMAC: with a key the recorder records a message
// sealed under it and counts, without recording, one sealed under another
// key or none.
func TestRecorderVerifiesMAC(t *testing.T) {
	key, other := broadcast.Key(bytes.Repeat([]byte{1}, broadcast.KeySize)), broadcast.Key(bytes.Repeat([]byte{2}, broadcast.KeySize))
	r := newRecorder(3)
	r.verify = broadcast.NewCodec(0, key)
	msg := func(seq uint64, k broadcast.Key) []byte {
		m := make([]byte, headerLen+broadcast.MACSize)
		putHeader(m, seq, time.Now().UnixNano())
		broadcast.NewCodec(0, k).SealMAC(m)
		return m
	}
	r.receive(msg(0, key))
	r.receive(msg(1, other))
	r.receive(msg(2, nil))
	lat, bad := r.snapshot()
	if lat[0] < 0 || lat[1] != -1 || lat[2] != -1 || bad != 2 {
		t.Fatalf("latencies %v, %d refused; want only message 0 and 2 refused", lat, bad)
	}
}

func TestRecorder(t *testing.T) {
	r := newRecorder(3)
	msg := make([]byte, headerLen)
	put := func(seq uint64, sentAt int64) []byte {
		putHeader(msg, seq, sentAt)
		return msg
	}
	if r.record(150, put(0, 100)) {
		t.Fatal("over after one message")
	}
	if r.record(170, put(0, 100)) { // a duplicate counts once
		t.Fatal("over after a duplicate")
	}
	if r.record(10, msg[:headerLen-1]) {
		t.Fatal("over after a short message")
	}
	if !r.record(400, put(endSeq, 390)) {
		t.Fatal("end marker did not end the run")
	}
	if got, bad := r.snapshot(); !slices.Equal(got, []int64{50, -1, -1}) || bad != 0 {
		t.Fatalf("latencies %v", got)
	}
	select {
	case <-r.done:
	default:
		t.Fatal("done not closed")
	}
}

// The header is little-endian whatever the host's byte order.
func TestHeaderLayout(t *testing.T) {
	msg := make([]byte, headerLen)
	putHeader(msg, 0x0102030405060708, 0x1112131415161718)
	want := []byte{8, 7, 6, 5, 4, 3, 2, 1, 0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11}
	if !bytes.Equal(msg, want) {
		t.Fatalf("header % x, want % x", msg, want)
	}
	if seq, at, ok := header(msg); !ok || seq != 0x0102030405060708 || at != 0x1112131415161718 {
		t.Errorf("header() = %x %x %v", seq, at, ok)
	}
}
