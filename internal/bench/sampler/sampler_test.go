package sampler

import (
	"strings"
	"testing"
)

func TestOptionsValidate(t *testing.T) {
	ok := Options{Vocab: []int{64}, Batch: []int{2}, Modes: []string{"plain"}, Impls: []string{"fast"}, Noises: []string{"pool"}, Iters: 1}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid options: %v", err)
	}
	for _, tc := range []struct {
		edit func(*Options)
		flag string
	}{
		{func(o *Options) { o.Iters = 0 }, "--iters"},
		{func(o *Options) { o.Vocab = []int{64, 0} }, "--vocab"},
		{func(o *Options) { o.Batch = []int{-1} }, "--batch"},
		{func(o *Options) { o.Modes = []string{"fancy"} }, "--mode"},
		{func(o *Options) { o.Impls = []string{"slow"} }, "--impl"},
		{func(o *Options) { o.Noises = []string{"sync"} }, "--noise"},
	} {
		o := ok
		tc.edit(&o)
		if err := o.Validate(); err == nil || !strings.HasPrefix(err.Error(), tc.flag+":") {
			t.Errorf("%+v: error %v, want one naming %s", o, err, tc.flag)
		}
	}
}

// Cases come in the order of the flags' nesting: vocab, batch, impl,
// noise, then mode varies fastest.
func TestCasesOrder(t *testing.T) {
	o := Options{Vocab: []int{1, 2}, Batch: []int{3}, Impls: []string{"fast", "reference"}, Noises: []string{"pool"}, Modes: []string{"plain", "topk"}}
	cs := o.cases()
	if len(cs) != 8 {
		t.Fatalf("%d cases, want 8", len(cs))
	}
	want := []benchCase{{1, 3, "fast", "pool", "plain"}, {1, 3, "fast", "pool", "topk"}, {1, 3, "reference", "pool", "plain"}}
	for i, w := range want {
		if cs[i] != w {
			t.Errorf("case %d: %+v, want %+v", i, cs[i], w)
		}
	}
	if cs[7].vocab != 2 {
		t.Errorf("last case %+v", cs[7])
	}
}
