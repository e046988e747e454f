package step

import (
	"strings"
	"testing"
	"time"

	"github.com/tpcoord/tpcoord/broadcast/api"
)

// Overhead is total − forward − sample per step, in µs, nearest-rank.
func TestSummarize(t *testing.T) {
	steps := []api.StepTiming{
		{Rows: 2, AwaitMs: 0.01, PublishMs: 0.02, ForwardMs: 0.3, SampleMs: 0.04, ReplyMs: 0.05, TotalMs: 0.5},
		{Rows: 2, AwaitMs: 0.01, PublishMs: 0.02, ForwardMs: 0.3, SampleMs: 0.04, ReplyMs: 0.05, TotalMs: 0.6},
	}
	r := summarize(steps)
	if r.Steps != 2 || r.OverheadP50US < 159 || r.OverheadP50US > 161 || r.OverheadP99US < 259 || r.OverheadP99US > 261 {
		t.Errorf("summary %+v", r)
	}
	if r.StepP50US < 499 || r.StepP50US > 501 || r.ForwardP50US < 299 || r.ForwardP50US > 301 {
		t.Errorf("phase medians %+v", r)
	}
	if r := summarize(nil); r.Steps != 0 || r.OverheadP50US != 0 {
		t.Errorf("no steps: %+v", r)
	}
}

func TestOptionsValidate(t *testing.T) {
	ok := Options{Self: "/bin/tpcoord", NProc: []int{2, 4}, Batch: 2, Vocab: 4096, Tokens: 8,
		FloorPayload: 256, FloorInterval: time.Millisecond, FloorMessages: 50, Timeout: time.Minute}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid options: %v", err)
	}
	for _, tc := range []struct {
		edit func(*Options)
		flag string
	}{
		{func(o *Options) { o.NProc = nil }, "--nproc"},
		{func(o *Options) { o.NProc = []int{65} }, "--nproc"},
		{func(o *Options) { o.Batch = 0 }, "--batch"},
		{func(o *Options) { o.Vocab = 8 }, "--vocab"},
		{func(o *Options) { o.Tokens = 0 }, "--tokens"},
		{func(o *Options) { o.ForwardTime = -1 }, "--forward-time"},
		{func(o *Options) { o.Timeout = 0 }, "--timeout"},
		{func(o *Options) { o.FloorMessages = 5 }, "--messages"},
		{func(o *Options) { o.FloorPayload = 8 }, "--payload"},
		{func(o *Options) { o.Self = "" }, "Self"},
	} {
		o := ok
		tc.edit(&o)
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("%+v: error %v, want one naming %s", o, err, tc.flag)
		}
	}
}
