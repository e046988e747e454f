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

// The cases that differ only in mode form one group, timed interleaved.
func TestGroupLen(t *testing.T) {
	o := Options{Vocab: []int{64}, Batch: []int{1, 2}, Impls: []string{"fast"}, Noises: []string{"pool", "inline"}, Modes: []string{"plain", "greedy", "topk"}}
	cs := o.cases()
	var sizes []int
	for len(cs) > 0 {
		n := groupLen(cs)
		for _, c := range cs[1:n] {
			if c.vocab != cs[0].vocab || c.batch != cs[0].batch || c.noise != cs[0].noise {
				t.Fatalf("group of %+v holds %+v", cs[0], c)
			}
		}
		sizes = append(sizes, n)
		cs = cs[n:]
	}
	if len(sizes) != 4 || sizes[0] != 3 || sizes[3] != 3 {
		t.Fatalf("group sizes %v, want 4 groups of 3", sizes)
	}
}

// A group's calls read distinct pool rows, within an iteration and across
// iterations, until the pool wraps; the results come in mode order.
func TestRunGroupInterleaves(t *testing.T) {
	g := []benchCase{{256, 2, "fast", "pool", "plain"}, {256, 2, "fast", "pool", "greedy"}}
	const iters = 3
	pool := g[0].poolRows((iters + 1) * len(g))
	if len(pool) != 2*(iters+1)*len(g) {
		t.Fatalf("%d pool rows, want %d", len(pool), 2*(iters+1)*len(g))
	}
	seen := map[*float32]bool{}
	rows := g[0].rows(g[0].logits())
	for it := range iters + 1 {
		for m := range g {
			g[0].setNoise(rows, pool, it, callIndex(it, m, len(g)))
			for _, r := range rows {
				if seen[&r.Noise[0]] {
					t.Fatalf("iteration %d, mode %d: a pool row read twice", it, m)
				}
				seen[&r.Noise[0]] = true
			}
		}
	}
	res := runGroup(g, iters)
	if len(res) != 2 || res[0].Mode != "plain" || res[1].Mode != "greedy" || res[0].Iters != iters || res[1].Iters != iters {
		t.Fatalf("results %+v", res)
	}
	if res[0].MedianMS <= 0 || res[1].MedianMS <= 0 {
		t.Fatalf("no time measured: %+v", res)
	}
}
