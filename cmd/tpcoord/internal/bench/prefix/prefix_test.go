package prefix

import (
	"strings"
	"testing"
	"time"

	"github.com/tpcoord/tpcoord/broadcast/api"
)

func validOptions() Options {
	return Options{Self: "/bin/tpcoord", NProc: 2, KVBlocks: 1024, ForwardTime: time.Millisecond, Vocab: 4096, EOS: -1,
		PrefixTokens: 2048, SuffixTokens: 32, Requests: 16, MaxTokens: 8, Chats: 8, Turns: 6, TurnTokens: 128,
		AnswerTokens: 32, Rounds: 2, ForwardTimeout: time.Minute, Timeout: time.Minute}
}

func TestPrefixValidateNamesTheFlag(t *testing.T) {
	if err := validOptions().Validate(); err != nil {
		t.Fatalf("valid options: %v", err)
	}
	for _, tc := range []struct {
		flag string
		edit func(*Options)
	}{
		{"--nproc", func(o *Options) { o.NProc = 0 }},
		{"--rounds", func(o *Options) { o.Rounds = 0 }},
		{"--vocab", func(o *Options) { o.Vocab = 10 }},
		{"--eos", func(o *Options) { o.EOS = 4096 }},
		{"--requests", func(o *Options) { o.Requests = 1 }},
		{"--prefix-tokens", func(o *Options) { o.PrefixTokens = 0 }},
		{"--chats", func(o *Options) { o.Chats = -1 }},
		{"--turns", func(o *Options) { o.Turns = 0 }},
		{"--forward-time", func(o *Options) { o.ForwardTime = -time.Millisecond }},
		{"--forward-timeout", func(o *Options) { o.ForwardTimeout = 0 }},
		{"--timeout", func(o *Options) { o.Timeout = 0 }},
		{"--kv-blocks", func(o *Options) { o.KVBlocks = 100 }},
		{"--worker-cmd", func(o *Options) { o.WorkerCmd = `python3 "w.py` }},
	} {
		o := validOptions()
		tc.edit(&o)
		if err := o.Validate(); err == nil || !strings.HasPrefix(err.Error(), tc.flag+":") {
			t.Errorf("%s: error %v, want one naming it", tc.flag, err)
		}
	}
}

func TestPrefixBlocksNeeded(t *testing.T) {
	o := validOptions()
	// The chat's last turn: 6 × (128 + 32) = 960 tokens, 60 blocks, × 8
	// conversations; a TTFT request, 2088 tokens, is 131 blocks.
	if got := o.blocksNeeded(); got != 480 {
		t.Errorf("blocksNeeded = %d, want 480", got)
	}
	o.Chats = 0
	if got := o.blocksNeeded(); got != 131 {
		t.Errorf("blocksNeeded without chats = %d, want 131", got)
	}
	// A real worker's pool is its own: --kv-blocks is not checked.
	o.KVBlocks, o.WorkerCmd = 1, "python3 w.py --socket {socket}"
	if err := o.Validate(); err != nil {
		t.Errorf("with --worker-cmd: %v", err)
	}
}

func TestPrefixLaunchArgs(t *testing.T) {
	o := validOptions()
	on, off := strings.Join(o.launchArgs(1, true), " "), strings.Join(o.launchArgs(1, false), " ")
	if strings.Contains(on, "prefix-caching") || !strings.HasSuffix(off, " --enable-prefix-caching=false") {
		t.Errorf("caching on: %s\ncaching off: %s", on, off)
	}
	if !strings.Contains(on, "--worker-cmd /bin/tpcoord worker --socket {socket} --kv-blocks 1024") {
		t.Errorf("the synthetic worker: %s", on)
	}
	o.Self = "/a b/tpcoord"
	if got := o.workerCmd(); !strings.HasPrefix(got, "'/a b/tpcoord' worker ") {
		t.Errorf("a path with a blank: %s", got)
	}
}

func TestPrefixTokensAreFixedAndInRange(t *testing.T) {
	a, b := tokens(100, 64, 1, streamPrefix, 0), tokens(100, 64, 1, streamPrefix, 0)
	c := tokens(100, 64, 2, streamPrefix, 0)
	same := true
	for i := range a {
		if a[i] != b[i] || a[i] < firstToken || a[i] >= 64 {
			t.Fatalf("token %d: %d and %d", i, a[i], b[i])
		}
		same = same && a[i] == c[i]
	}
	if same {
		t.Error("rounds 1 and 2 drew the same prefix")
	}
}

func TestPrefixCacheDelta(t *testing.T) {
	before := api.KVStatus{PrefixCacheQueries: 100, PrefixCacheHits: 40, Preemptions: 1}
	after := api.KVStatus{PrefixCacheQueries: 1100, PrefixCacheHits: 840, Preemptions: 3}
	if got, want := cacheDelta(before, after, 999), (Cache{Queries: 1000, Hits: 800, Computed: 200, Preemptions: 2}); got != want {
		t.Errorf("caching on: %+v, want %+v", got, want)
	}
	// Caching off: rank 0 looks nothing up; every prompt token is computed.
	if got, want := cacheDelta(api.KVStatus{}, api.KVStatus{}, 999), (Cache{Computed: 999}); got != want {
		t.Errorf("caching off: %+v, want %+v", got, want)
	}
}

func TestPrefixCompare(t *testing.T) {
	ttft := []TTFTResult{
		ttftResult(0, true, []float64{500, 10, 30, 20}, Cache{}),
		ttftResult(0, false, []float64{520, 200, 220, 210}, Cache{}),
		ttftResult(1, false, []float64{510, 190, 230, 200}, Cache{}),
		ttftResult(1, true, []float64{480, 40, 20, 20}, Cache{}),
	}
	if r := ttft[0]; r.FirstMS != 500 || r.RestP50 != 20 || r.RestMax != 30 || r.Requests != 4 {
		t.Errorf("round 0 on: %+v", r)
	}
	chat := []ChatResult{
		chatResult(0, true, chatSamples{ttft: []float64{1, 2, 3}, promptTokens: 900}, Cache{Computed: 300}, 64),
		chatResult(0, false, chatSamples{ttft: []float64{4, 5, 6}, promptTokens: 900}, Cache{Computed: 900}, 128),
	}
	var s Summary
	compare(&s, ttft, chat)
	// On: first of 500 and 480; rest pooled 10 30 20 40 20 20.
	if s.On.Rounds != 2 || s.On.FirstMS != 490 || s.On.RestP50 != 20 || s.Off.RestP50 != 205 {
		t.Errorf("modes: on %+v, off %+v", s.On, s.Off)
	}
	if s.TTFTRatio != 20.0/205 || !s.TargetMet || s.Target != TargetTTFTRatio {
		t.Errorf("ratio %v, met %v", s.TTFTRatio, s.TargetMet)
	}
	if len(s.RoundRatios) != 2 || s.RoundRatios[0] != 20.0/210 || s.RoundRatios[1] != 20.0/200 {
		t.Errorf("round ratios %v", s.RoundRatios)
	}
	if s.ChatComputedRatio != 300.0/900 || s.On.ChatTTFTP50 != 2 || s.Off.ChatTTFTP99 != 6 || s.Off.MaxStepTokens != 128 {
		t.Errorf("chat: on %+v, off %+v, ratio %v", s.On, s.Off, s.ChatComputedRatio)
	}
	// A run without the uncached figure meets nothing.
	compare(&s, ttft[:1], nil)
	if s.TargetMet || s.TTFTRatio != 0 {
		t.Errorf("no caching-off job: ratio %v, met %v", s.TTFTRatio, s.TargetMet)
	}
}
