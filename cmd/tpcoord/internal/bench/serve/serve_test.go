package serve

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func ms2d(v ...float64) []time.Duration {
	out := make([]time.Duration, len(v))
	for i, x := range v {
		out[i] = time.Duration(x * 1e6)
	}
	return out
}

// summarize: TTFT is each request's first arrival, ITL every gap between
// consecutive arrivals, tokens/s the round's tokens over its wall time.
func TestSummarize(t *testing.T) {
	rs := roundSamples{elapsed: 2 * time.Second, samples: []sample{
		{arrivals: ms2d(10, 12, 15)}, // ttft 10, itl 2 3
		{arrivals: ms2d(30, 31, 31)}, // ttft 30, itl 1 0 (two tokens in one event)
		{arrivals: ms2d(20, 24, 28)}, // ttft 20, itl 4 4
	}}
	r := summarize(PathHTTP, 3, rs)
	if r.Kind != "round" || r.Path != PathHTTP || r.Round != 3 || r.Requests != 3 || r.OutputTokens != 9 {
		t.Fatalf("identity %+v", r)
	}
	if r.ElapsedS != 2 || r.TokensPerS != 4.5 {
		t.Errorf("elapsed %v, tokens/s %v, want 2 and 4.5", r.ElapsedS, r.TokensPerS)
	}
	// ttft {10,20,30}; itl {0,1,2,3,4,4}: nearest-rank p50 2, p99 4.
	if r.TTFTP50MS != 20 || r.TTFTP99MS != 30 || r.ITLP50MS != 2 || r.ITLP99MS != 4 {
		t.Errorf("latencies %+v", r)
	}
	if z := summarize(PathNATS, 0, roundSamples{}); z.TokensPerS != 0 || z.TTFTP50MS != 0 || z.Requests != 0 {
		t.Errorf("an empty round: %+v", z)
	}
}

// compare: medians over each path's rounds, the tokens/s ratio of the
// medians and of each HTTP round with the NATS round after it, the TTFT
// p50 difference, and the target.
func TestCompare(t *testing.T) {
	round := func(path string, tps, ttft float64) RoundResult {
		return RoundResult{Path: path, TokensPerS: tps, TTFTP50MS: ttft, TTFTP99MS: 2 * ttft, ITLP50MS: 20, ITLP99MS: 30,
			ttft: []float64{ttft - 1, ttft, ttft + 1}}
	}
	setTTFT := func(r *RoundResult, ttft float64) {
		r.TTFTP50MS, r.ttft = ttft, []float64{ttft - 1, ttft, ttft + 1}
	}
	rounds := []RoundResult{
		round(PathHTTP, 960, 10.5), round(PathNATS, 1000, 10),
		round(PathHTTP, 900, 12), round(PathNATS, 1000, 11),
		round(PathHTTP, 990, 11), round(PathNATS, 1100, 10),
	}
	var s Summary
	compare(&s, rounds)
	if s.HTTP.Rounds != 3 || s.HTTP.TokensPerS != 960 || s.HTTP.TTFTP50MS != 11 || s.HTTP.TTFTP99MS != 22 {
		t.Errorf("http %+v", s.HTTP)
	}
	if s.NATS.Rounds != 3 || s.NATS.TokensPerS != 1000 || s.NATS.TTFTP50MS != 10 || s.NATS.ITLP99MS != 30 {
		t.Errorf("nats %+v", s.NATS)
	}
	// Pooled: HTTP {9.5 10 10.5 11 11 11.5 12 12 13}, NATS {9 9 10 10 10 11 11 11 12}.
	if s.TokensRatio != 0.96 || s.TTFTDiffMS != 1 || s.HTTP.TTFTP50AllMS != 11 || s.TTFTDiffRoundsMS != 1 {
		t.Errorf("ratio %v, diff %v (pooled p50 %v), over rounds %v; want 0.96, 1, 11, 1", s.TokensRatio, s.TTFTDiffMS, s.HTTP.TTFTP50AllMS, s.TTFTDiffRoundsMS)
	}
	if ci := s.TTFTDiffCI95MS; !(ci[0] <= s.TTFTDiffMS && s.TTFTDiffMS <= ci[1] && ci[0] < ci[1]) {
		t.Errorf("interval %v around %v", ci, s.TTFTDiffMS)
	}
	if want := []float64{0.96, 0.9, 0.9}; len(s.PairRatios) != 3 || s.PairRatios[0] != want[0] || s.PairRatios[1] != want[1] || s.PairRatios[2] != want[2] {
		t.Errorf("pair ratios %v, want %v", s.PairRatios, want)
	}
	if !s.TargetMet {
		t.Error("0.96× and +1 ms: the target is met")
	}
	setTTFT(&rounds[0], 12)
	setTTFT(&rounds[2], 12)
	setTTFT(&rounds[4], 12)
	compare(&s, rounds)
	if s.TargetMet || s.TTFTDiffMS != 2 {
		t.Errorf("+2 ms TTFT: met %v, diff %v", s.TargetMet, s.TTFTDiffMS)
	}
	setTTFT(&rounds[0], 10)
	rounds[0].TokensPerS = 940
	compare(&s, []RoundResult{rounds[0], rounds[1]})
	if s.TargetMet || s.TokensRatio != 0.94 {
		t.Errorf("0.94×: met %v, ratio %v", s.TargetMet, s.TokensRatio)
	}
}

func TestReadSSE(t *testing.T) {
	ev := func(ids string) string {
		return `data: {"id":"x","choices":[{"index":0,"text":"","token_ids":[` + ids + `],"finish_reason":null}]}` + "\n\n"
	}
	var got []int
	err := readSSE(strings.NewReader(ev("5")+": comment\n\n"+ev("6,7")+ev("")+"data: [DONE]\n\n"), func(n int) { got = append(got, n) })
	if err != nil || len(got) != 2 || got[0] != 1 || got[1] != 2 {
		t.Fatalf("events %v, err %v; want [1 2]", got, err)
	}
	for _, tc := range []struct{ name, in, want string }{
		{"cut", ev("5"), "before data: [DONE]"},
		{"error event", `data: {"error":{"message":"overloaded","type":"rate_limit_error"}}` + "\n\n", "overloaded"},
		{"malformed", "data: {nope\n\n", "event"},
		{"long", "data: " + strings.Repeat("x", maxEventBytes) + "\n", "longer than"},
	} {
		err := readSSE(strings.NewReader(tc.in), func(int) {})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
}

// A round of requests hands out each index once; a window hands out
// indices only while it lasts.
func TestLoadNext(t *testing.T) {
	var n atomic.Int64
	l := load{requests: 3}
	var got []int
	for i, ok := l.next(&n, time.Now()); ok; i, ok = l.next(&n, time.Now()) {
		got = append(got, i)
	}
	if len(got) != 3 || got[0] != 0 || got[2] != 2 {
		t.Errorf("requests: %v", got)
	}
	n.Store(0)
	w := load{window: time.Hour}
	if i, ok := w.next(&n, time.Now()); !ok || i != 0 {
		t.Errorf("open window: %d %v", i, ok)
	}
	if _, ok := w.next(&n, time.Now().Add(-2*time.Hour)); ok {
		t.Error("a window that has passed handed out a request")
	}
}

func TestValidateNamesTheFlag(t *testing.T) {
	good := Options{Self: "x", NProc: 2, Clients: 4, Rounds: 1, Requests: 4, MaxTokens: 4, Vocab: 4096, Timeout: time.Minute, Gateway: GatewayLaunch, HTTPClient: HTTPClientRaw}
	if err := good.Validate(); err != nil {
		t.Fatalf("valid options: %v", err)
	}
	for _, tc := range []struct {
		edit func(*Options)
		flag string
	}{
		{func(o *Options) { o.NProc = 0 }, "--nproc"},
		{func(o *Options) { o.Clients = 0 }, "--clients"},
		{func(o *Options) { o.Rounds = 0 }, "--rounds"},
		{func(o *Options) { o.Requests = -1 }, "--requests"},
		{func(o *Options) { o.Duration = time.Second }, "--duration"},
		{func(o *Options) { o.Requests = 0 }, "--duration"},
		{func(o *Options) { o.MaxTokens = 0 }, "--max-tokens"},
		{func(o *Options) { o.Vocab = 8 }, "--vocab"},
		{func(o *Options) { o.ForwardTime = -time.Millisecond }, "--forward-time"},
		{func(o *Options) { o.Timeout = 0 }, "--timeout"},
		{func(o *Options) { o.HTTPClient = "curl" }, "--http-client"},
		{func(o *Options) { o.Self = "" }, "Self"},
	} {
		o := good
		tc.edit(&o)
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("error %v, want one naming %s", err, tc.flag)
		}
	}
}

// Think times are the same for a request on both paths, within the bound,
// and spread (not all one value).
func TestThinkTime(t *testing.T) {
	l := load{seed: seedBase, think: 40 * time.Millisecond}
	seen := map[time.Duration]bool{}
	for i := range 1000 {
		d := l.thinkTime(i)
		if d < 0 || d >= l.think || d != l.thinkTime(i) {
			t.Fatalf("request %d: think %v", i, d)
		}
		seen[d/time.Millisecond] = true
	}
	if len(seen) < 35 {
		t.Fatalf("1000 draws hit %d of 40 millisecond buckets", len(seen))
	}
	other := l
	other.round = 1
	differ := 0
	for i := range 100 {
		if other.thinkTime(i) != l.thinkTime(i) {
			differ++
		}
	}
	if differ < 90 {
		t.Fatalf("rounds 0 and 1 share %d of 100 think times; each round draws its own", 100-differ)
	}
	if (load{}).thinkTime(3) != 0 {
		t.Fatal("no think bound, yet a think time")
	}
}

// A constant shift between paired rounds is the only difference every
// resampling sees: the interval is that shift alone.
func TestBootstrapConstantShift(t *testing.T) {
	var h, n []RoundResult
	for r := range 6 {
		base := []float64{30 + float64(r), 35, 40 + float64(r%3), 44}
		shifted := make([]float64, len(base))
		for i, v := range base {
			shifted[i] = v + 0.75
		}
		h, n = append(h, RoundResult{ttft: shifted}), append(n, RoundResult{ttft: base})
	}
	if ci := bootstrapTTFTDiff(h, n, 200, 1); ci != [2]float64{0.75, 0.75} {
		t.Fatalf("interval %v, want [0.75 0.75]", ci)
	}
	if ci := bootstrapTTFTDiff(nil, n, 200, 1); ci != [2]float64{} {
		t.Fatalf("no rounds: %v", ci)
	}
}
