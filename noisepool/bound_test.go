package noisepool

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// TestBoundTable: every bound is the exact value at the top of its table
// interval, so it is at least the value of every input in the interval
// (GumbelFromBits is non-decreasing: TestMonotone, and over all 2^32
// inputs TestMonotoneExhaustive, which also checks every bound), and it
// is no looser than it must be.
func TestBoundTable(t *testing.T) {
	for j := range uint32(boundSize) {
		first := j<<boundShift ^ boundFlip
		last := (j<<boundShift | (1<<boundShift - 1)) ^ boundFlip
		b := BoundFromBits(first)
		if BoundFromBits(last) != b {
			t.Fatalf("interval %d: bounds %v and %v differ", j, b, BoundFromBits(last))
		}
		if g := GumbelFromBits(last); b < g {
			t.Fatalf("interval %d: bound %v below the value %v of its last input", j, b, g)
		}
		if j+1 < boundSize {
			if next := GumbelFromBits((j+1)<<boundShift ^ boundFlip); b != next {
				t.Fatalf("interval %d: bound %v, want the next interval's first value %v", j, b, next)
			}
		} else if b != MaxGumbel {
			t.Fatalf("top interval: bound %v, want MaxGumbel %v", b, MaxGumbel)
		}
	}
	r := rand.New(rand.NewPCG(3, 4))
	for range 1 << 20 {
		b := r.Uint32()
		if BoundFromBits(b) < GumbelFromBits(b) {
			t.Fatalf("bits %#x: bound %v below the value %v", b, BoundFromBits(b), GumbelFromBits(b))
		}
	}
}

// TestFillBoundRow: every length and even offset gives
// BoundFromBits(Bits(seed, i)).
func TestFillBoundRow(t *testing.T) {
	for _, n := range []int{0, 1, 2, 3, 31, 32, 33, 1001} {
		dst := make([]float32, n)
		FillBoundRow(9, 4, dst)
		seed := RowSeed(9, 4)
		for i, v := range dst {
			if want := BoundFromBits(Bits(seed, i)); math.Float32bits(v) != math.Float32bits(want) {
				t.Fatalf("n %d: value %d = %v, want %v", n, i, v, want)
			}
		}
		if n > 4 {
			tail := make([]float32, n-4)
			fillBoundRow(seed, 4, tail)
			for i, v := range tail {
				if v != dst[4+i] {
					t.Fatalf("n %d: from offset 4, value %d = %v, want %v", n, i, v, dst[4+i])
				}
			}
		}
	}
}

// TestPoolBoundRows: a bound pool hands out bound rows, from producers and
// inline alike, and says so.
func TestPoolBoundRows(t *testing.T) {
	cfg := smallConfig(1001, 8, 1, 2)
	cfg.Form = FormBound
	p := newTestPool(t, cfg)
	p.Activate(5, 0)
	if err := p.Warm(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := make([]float32, cfg.Vocab)
	for _, row := range []uint64{0, 7} { // 0 is prefetched, 7 is not
		r, err := p.Take(5, row)
		if err != nil {
			t.Fatal(err)
		}
		if r.Form != FormBound || r.Inline != (row == 7) {
			t.Fatalf("row %d: form %v inline %v", row, r.Form, r.Inline)
		}
		FillBoundRow(5, row, want)
		for i := range want {
			if r.Values[i] != want[i] {
				t.Fatalf("row %d value %d = %v, want %v", row, i, r.Values[i], want[i])
			}
		}
		checkBlockMax(t, r)
		if err := p.Release(r); err != nil {
			t.Fatal(err)
		}
	}
	if got := p.Config().Form; got != FormBound {
		t.Errorf("Config().Form = %v", got)
	}
}

func TestParseForm(t *testing.T) {
	for _, f := range []Form{FormAuto, FormExact, FormBound} {
		var g Form
		if err := g.Set(f.String()); err != nil || g != f {
			t.Errorf("Set(%q) = %v, %v", f.String(), g, err)
		}
	}
	if _, err := ParseForm("gumbel"); err == nil {
		t.Error("ParseForm accepted gumbel")
	}
	if f := DefaultForm(); (f == FormExact) != useAVX512 || f == FormAuto {
		t.Errorf("DefaultForm() = %v with useAVX512 %v", f, useAVX512)
	}
}

func TestProducersFor(t *testing.T) {
	const step = 20 * time.Millisecond
	for _, c := range []struct {
		batch, vocab int
		ns           float64
		procs        int
		want         int
		keepsUp      bool
	}{
		{32, 100352, 1, 2, 1, true},            // bound rows: 0.16 cores
		{32, 100352, 0.4, 2, 1, true},          // AVX-512 exact rows
		{32, 100352, 12, 2, 1, false},          // portable exact rows on 2 cores: 1.9 cores needed
		{32, 100352, 12, 8, 4, true},           // ... on 8 cores: 3.85 / 0.5 -> 4 producers
		{32, 100352, 12, 4, 3, false},          // capped at procs-1
		{1, 1000, 1, 1, 1, true},               // tiny
		{1 << 30, 1 << 31, 100, 64, 63, false}, // huge numbers do not overflow
		{0, 100, 1, 2, 1, true},                // nothing to size: one producer
	} {
		n, need, ok := ProducersFor(c.batch, c.vocab, step, c.ns, c.procs)
		if n != c.want || ok != c.keepsUp || need < 0 || math.IsNaN(need) {
			t.Errorf("ProducersFor(%d, %d, %v, %v, %d) = %d, %.3f, %v; want %d, %v",
				c.batch, c.vocab, step, c.ns, c.procs, n, need, ok, c.want, c.keepsUp)
		}
	}
}

// TestAutoProducers: the default configuration measures a row and starts
// the producers ProducersFor gives.
func TestAutoProducers(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Vocab, cfg.Rows = 4096, 16
	p := newTestPool(t, cfg)
	z := p.Sizing()
	if z.NsPerValue <= 0 || z.Producers < 1 || p.Config().Producers != z.Producers {
		t.Fatalf("sizing %+v, config producers %d", z, p.Config().Producers)
	}
	if p.Config().Form == FormAuto {
		t.Error("Form not resolved")
	}
}

// TestFillBlockMax: every block's maximum, short last blocks included, for
// rows with the maximum at every position of a block.
func TestFillBlockMax(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{1, 3, 255, 256, 257, 1000, 100352} {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(r.NormFloat64())
		}
		for i := 0; i < n; i += 37 {
			v[i] = 50 + float32(i) // a maximum at varied offsets
		}
		got := make([]float32, BlockCount(n))
		FillBlockMax(v, got)
		for b := range got {
			blk := v[b*BlockSize : min((b+1)*BlockSize, n)]
			want := blk[0]
			for _, x := range blk {
				want = max(want, x)
			}
			if got[b] != want {
				t.Fatalf("n %d block %d: %v, want %v", n, b, got[b], want)
			}
		}
	}
}
