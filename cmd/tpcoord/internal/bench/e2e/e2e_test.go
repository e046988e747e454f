package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/tpcoord/tpcoord/broadcast/api"
)

func TestSelectCombos(t *testing.T) {
	all, err := selectCombos([]string{"all"})
	if err != nil || len(all) != 8 || all[0] != Baseline || all[7] != Full {
		t.Fatalf("all: %v %v", all, err)
	}
	// Canonical order, each once.
	got, err := selectCombos([]string{"pool+logspace+rank0", "sync+softmax+all", "pool+logspace+rank0"})
	if err != nil || len(got) != 2 || got[0] != Baseline || got[1] != Full {
		t.Fatalf("got %v %v", got, err)
	}
	for _, bad := range []string{"pool+softmax", "inline+softmax+all", "pool+softmax+all+x", ""} {
		if _, err := selectCombos([]string{bad}); err == nil || !strings.HasPrefix(err.Error(), "--combos:") {
			t.Errorf("%q: error %v, want one naming --combos", bad, err)
		}
	}
}

func TestOptionsValidate(t *testing.T) {
	ok := Options{Self: "/bin/tpcoord", NProc: 2, Batch: 2, Vocab: 4096, Tokens: 4, Combos: []string{"all"}, Timeout: time.Minute}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid options: %v", err)
	}
	for _, tc := range []struct {
		edit func(*Options)
		flag string
	}{
		{func(o *Options) { o.NProc = 0 }, "--nproc"},
		{func(o *Options) { o.Batch = 0 }, "--batch"},
		{func(o *Options) { o.Vocab = 8 }, "--vocab"},
		{func(o *Options) { o.ForwardTime = -time.Millisecond }, "--forward-time"},
		{func(o *Options) { o.Tokens = 0 }, "--tokens"},
		{func(o *Options) { o.Timeout = 0 }, "--timeout"},
		{func(o *Options) { o.Combos = []string{"x"} }, "--combos"},
		{func(o *Options) { o.Self = "" }, "Self"},
	} {
		o := ok
		tc.edit(&o)
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("%+v: error %v, want one naming %s", o, err, tc.flag)
		}
	}
}

// Each stage's lines compare the right pairs: baseline with only the stage
// on over the baseline, full over full with only the stage off.
func TestStageResults(t *testing.T) {
	rate := map[Combo]float64{
		Baseline:                     10,
		{"pool", "softmax", "all"}:   20, // noise only on
		Full:                         80,
		{"pool", "softmax", "rank0"}: 40, // sampling only off
	}
	got := stageResults(rate)
	if len(got) != 3 {
		t.Fatalf("%d stages", len(got))
	}
	noise, sampling, ranks := got[0], got[1], got[2]
	if noise.Stage != "noise" || noise.OnAlone == nil || *noise.OnAlone != 2 || noise.OffAlone != nil {
		t.Errorf("noise: %+v", noise)
	}
	if sampling.Stage != "sampling" || sampling.OnAlone != nil || sampling.OffAlone == nil || *sampling.OffAlone != 2 {
		t.Errorf("sampling: %+v", sampling)
	}
	if ranks.OnAlone != nil || ranks.OffAlone != nil {
		t.Errorf("sampling-ranks: %+v", ranks)
	}
}

func TestBreakdown(t *testing.T) {
	if breakdown(nil) != nil {
		t.Error("a breakdown of no steps")
	}
	steps := []api.StepTiming{
		{ForwardMs: 3, SampleMs: 1, TotalMs: 5},
		{ForwardMs: 1, SampleMs: 3, TotalMs: 9},
		{ForwardMs: 2, SampleMs: 2, TotalMs: 7},
	}
	b := breakdown(steps)
	if b.Steps != 3 || b.Forward != 2 || b.Sample != 2 || b.Total != 7 {
		t.Errorf("breakdown %+v", b)
	}
	steps[1].TotalMs = 12
	if m := meanBreakdown(steps); m.Steps != 3 || m.Forward != 2 || m.Sample != 2 || m.Total != 8 {
		t.Errorf("mean breakdown %+v", m)
	}
	if meanBreakdown(nil) != nil {
		t.Error("a mean breakdown of no steps")
	}
}

func TestPoolCounts(t *testing.T) {
	before := map[string]uint64{"noise_rows_taken": 10, "noise_rows_inline": 2, "noise_take_errors": 1, "noise_producers": 1}
	after := map[string]uint64{"noise_rows_taken": 110, "noise_rows_inline": 5, "noise_take_errors": 1, "noise_producers": 1, "noise_bound_rows": 1}
	got := poolCounts(before, after)
	if got == nil || *got != (PoolCounts{Producers: 1, Form: "bound", Taken: 100, Inline: 3}) { // no new take errors
		t.Fatalf("poolCounts = %+v", got)
	}
	if poolCounts(nil, after) != nil || poolCounts(before, nil) != nil {
		t.Error("counts without both statuses")
	}
	after["noise_take_errors"] = 3 // two rows found no slot: needed and made inline
	if got := poolCounts(before, after); got.Taken != 102 || got.Inline != 5 {
		t.Errorf("with take errors: %+v", got)
	}
	// A restarted rank 0 has smaller counters: no wrap-around.
	if got := poolCounts(after, before); got.Taken != 0 || got.Inline != 0 || got.Form != "exact" {
		t.Errorf("decreasing counters: %+v", got)
	}
}
