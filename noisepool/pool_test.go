package noisepool

import (
	"bytes"
	"context"
	"errors"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tpcoord/tpcoord/internal/fielderr"
	"github.com/tpcoord/tpcoord/internal/poll"
)

func smallConfig(vocab, rows, producers, lookahead int) Config {
	c := DefaultConfig()
	c.Vocab, c.Rows, c.Producers, c.Lookahead = vocab, rows, producers, lookahead
	c.FillChunk = 64
	return c
}

func newTestPool(t *testing.T, cfg Config) *Pool {
	t.Helper()
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// checkRow verifies a handed-out row's identity and every value.
func checkRow(t *testing.T, r Row, key, row uint64) {
	t.Helper()
	if r.Key != key || r.Row != row {
		t.Fatalf("got row (%d,%d), want (%d,%d)", r.Key, r.Row, key, row)
	}
	want := make([]float32, len(r.Values))
	fillAs(r.Form, key, row, want)
	for i := range want {
		if math.Float32bits(r.Values[i]) != math.Float32bits(want[i]) {
			t.Fatalf("row (%d,%d) value %d = %v, want %v (inline %v)", key, row, i, r.Values[i], want[i], r.Inline)
		}
	}
	checkBlockMax(t, r)
}

// fillAs fills dst with row (key, row) in form f, as FillRow or
// FillBoundRow do. The pool tests run with the build's default form: exact
// rows with the AVX-512 kernel, bound rows elsewhere.
func fillAs(f Form, key, row uint64, dst []float32) {
	if f == FormBound {
		FillBoundRow(key, row, dst)
		return
	}
	FillRow(key, row, dst)
}

// checkBlockMax verifies a handed-out row's block maxima.
func checkBlockMax(t *testing.T, r Row) {
	t.Helper()
	if len(r.BlockMax) != BlockCount(len(r.Values)) {
		t.Fatalf("row (%d,%d): %d block maxima for %d values", r.Key, r.Row, len(r.BlockMax), len(r.Values))
	}
	for b, m := range r.BlockMax {
		blk := r.Values[b*BlockSize : min((b+1)*BlockSize, len(r.Values))]
		if want := slices.Max(blk); m != want {
			t.Fatalf("row (%d,%d) block %d: max %v, want %v (inline %v)", r.Key, r.Row, b, m, want, r.Inline)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("default config invalid: %v", err)
	}
	if b := DefaultConfig().Bytes(); b != 128*(100352+392)*4 {
		t.Errorf("default Bytes = %d", b)
	}
	for _, c := range []struct {
		mod  func(*Config)
		flag string // the field the error names
	}{
		{func(c *Config) { c.Vocab = 0 }, "Vocab"},
		{func(c *Config) { c.Producers = -2 }, "Producers"},
		{func(c *Config) { c.Batch = 0 }, "Batch"},
		{func(c *Config) { c.Step = 0 }, "Step"},
		{func(c *Config) { c.Form = FormBound + 1 }, "Form"},
		{func(c *Config) { c.Rows = 0 }, "Rows"},
		{func(c *Config) { c.Producers, c.Rows = 4, 4 }, "Rows"},
		{func(c *Config) { c.Rows = 1 }, "Rows"}, // auto producers: at least one
		{func(c *Config) { c.Lookahead = -1 }, "Lookahead"},
		{func(c *Config) { c.MaxBytes = 0 }, "MaxBytes"},
		{func(c *Config) { c.Rows = 10000 }, "Rows"},
		{func(c *Config) { c.Vocab, c.Rows, c.MaxBytes = math.MaxInt32, math.MaxInt, math.MaxInt64 }, "Rows"}, // the product overflows
		{func(c *Config) { c.FillChunk = -2 }, "FillChunk"},
	} {
		cfg := DefaultConfig()
		c.mod(&cfg)
		err := cfg.Validate()
		var fe *fielderr.Error
		if !errors.As(err, &fe) || fe.Field != c.flag {
			t.Errorf("%+v: error %v, want one naming %s", cfg, err, c.flag)
		}
		if _, err := New(cfg); err == nil {
			t.Errorf("New accepted %+v", cfg)
		}
	}
	// No producers: one row is enough (every Take is inline).
	c := DefaultConfig()
	c.Producers, c.Rows = 0, 1
	if err := c.Validate(); err != nil {
		t.Errorf("no producers, one row: %v", err)
	}
}

// TestPoolServesPrefetchedRows: after Warm, an active stream's next rows come
// from the pool (not inline), with the same bits as FillRow.
func TestPoolServesPrefetchedRows(t *testing.T) {
	p := newTestPool(t, smallConfig(1001, 16, 2, 3))
	seed := uint64(1234)
	seeded := StreamKey(&seed, 0, 0)
	unseeded := StreamKey(nil, 77, 5)
	p.Activate(seeded, 10)
	p.Activate(unseeded, 0)
	if err := p.Warm(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s := p.Stats(); s.Ready != 6 || s.Produced != 6 || s.Streams != 2 {
		t.Fatalf("after Warm: %+v, want 6 ready rows of 2 streams", s)
	}
	for step := range uint64(3) {
		for _, k := range []struct{ key, row uint64 }{{seeded, 10 + step}, {unseeded, step}} {
			r, err := p.Take(k.key, k.row)
			if err != nil {
				t.Fatal(err)
			}
			if r.Inline {
				t.Errorf("row (%d,%d) generated inline after Warm", k.key, k.row)
			}
			checkRow(t, r, k.key, k.row)
			if err := p.Release(r); err != nil {
				t.Fatal(err)
			}
		}
		if step == 0 {
			if err := p.Warm(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}
	s := p.Stats()
	if s.Taken != 6 || s.Inline > 4 || s.Held != 0 {
		t.Errorf("stats %+v", s)
	}
	if s.ProducerBusy <= 0 {
		t.Errorf("ProducerBusy = %v", s.ProducerBusy)
	}
}

// TestInlineWhenNotReady: with no producers every row is generated inline,
// counted, with the same bits.
func TestInlineWhenNotReady(t *testing.T) {
	p := newTestPool(t, smallConfig(333, 3, 0, 2))
	p.Activate(9, 0)
	if err := p.Warm(context.Background()); err != nil {
		t.Fatal(err)
	}
	for row := range uint64(10) {
		r, err := p.Take(9, row)
		if err != nil {
			t.Fatal(err)
		}
		if !r.Inline {
			t.Fatal("row not inline without producers")
		}
		checkRow(t, r, 9, row)
		if err := p.Release(r); err != nil {
			t.Fatal(err)
		}
	}
	if s := p.Stats(); s.Inline != 10 || s.Taken != 10 || s.Produced != 0 {
		t.Errorf("stats %+v", s)
	}
}

// TestRingWrapCounter runs two streams through a 4-row ring for many
// wrap-arounds with two producers: every row handed out has the requested
// (key,row) identity and values, rows come in order, none is repeated or
// skipped, no slot is handed out twice at once, and the counters add up.
func TestRingWrapCounter(t *testing.T) {
	steps := uint64(2000)
	if testing.Short() || raceEnabled {
		steps = 300
	}
	const vocab = 257 // odd: exercises the kernel's tail on every row
	p := newTestPool(t, smallConfig(vocab, 4, 2, 2))
	keys := []uint64{StreamKey(nil, 1, 1), StreamKey(nil, 1, 2)}
	for _, k := range keys {
		p.Activate(k, 0)
	}
	seen := map[RowID]bool{}
	for step := range steps {
		if step%3 == 0 { // a mix of rows served by producers and inline rows
			if err := p.Warm(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		var held []Row
		for _, k := range keys {
			r, err := p.Take(k, step)
			if err != nil {
				t.Fatal(err)
			}
			checkRow(t, r, k, step)
			if seen[r.RowID] {
				t.Fatalf("row %+v handed out twice", r.RowID)
			}
			seen[r.RowID] = true
			for _, h := range held {
				if &h.Values[0] == &r.Values[0] {
					t.Fatalf("slot of held row %+v handed out again for %+v", h.RowID, r.RowID)
				}
			}
			held = append(held, r)
		}
		for _, r := range held {
			if err := p.Release(r); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(seen) != int(steps)*len(keys) {
		t.Fatalf("%d distinct rows, want %d", len(seen), int(steps)*len(keys))
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	s := p.Stats()
	if s.Taken != steps*2 || s.Held != 0 || s.Filling != 0 {
		t.Errorf("stats %+v", s)
	}
	// Every handed-out row was either prefetched or inline; every produced
	// row was taken, discarded, or is still ready.
	if fromPool := s.Taken - s.Inline; fromPool+s.Discarded+uint64(s.Ready) != s.Produced {
		t.Errorf("counters do not add up: %+v", s)
	}
	t.Logf("%+v", s)
}

func TestReleaseErrors(t *testing.T) {
	p := newTestPool(t, smallConfig(10, 2, 0, 1))
	r, err := p.Take(1, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Release(r); err != nil {
		t.Fatal(err)
	}
	if err := p.Release(r); !errors.Is(err, ErrNotHeld) {
		t.Errorf("second Release: %v", err)
	}
	if err := p.Release(Row{}); !errors.Is(err, ErrNotHeld) {
		t.Errorf("Release of zero Row: %v", err)
	}
	// A stale Row whose slot was handed out again is refused too.
	r2, _ := p.Take(1, 2)
	r3, _ := p.Take(1, 3)
	if err := p.Release(r); !errors.Is(err, ErrNotHeld) {
		t.Errorf("stale Release: %v", err)
	}
	if _, err := p.Take(1, 4); !errors.Is(err, ErrExhausted) {
		t.Errorf("Take with every slot held: %v", err)
	}
	p.Release(r2)
	p.Release(r3)
}

// TestEvictAndDeactivate: more wanted rows than slots; producers keep the
// nearest rows, and deactivated streams' rows are discarded.
func TestEvictAndDeactivate(t *testing.T) {
	p := newTestPool(t, smallConfig(50, 3, 1, 4))
	p.Activate(1, 0)
	p.Activate(2, 0)
	p.Activate(2, 0) // shared: two references
	if err := p.Warm(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s := p.Stats(); s.Ready != 3 || s.Streams != 2 {
		t.Fatalf("stats %+v", s)
	}
	p.Deactivate(2) // one reference left
	if s := p.Stats(); s.Streams != 2 {
		t.Fatalf("stream dropped with a reference left: %+v", s)
	}
	p.Deactivate(2)
	p.Deactivate(3) // unknown: ignored
	if err := p.Warm(context.Background()); err != nil {
		t.Fatal(err)
	}
	s := p.Stats()
	if s.Streams != 1 || s.Ready != 3 {
		t.Fatalf("after deactivating stream 2: %+v", s)
	}
	r, err := p.Take(1, 0)
	if err != nil {
		t.Fatal(err)
	}
	checkRow(t, r, 1, 0)
	p.Release(r)
	// Skipping ahead drops the rows passed over.
	r, err = p.Take(1, 2)
	if err != nil {
		t.Fatal(err)
	}
	checkRow(t, r, 1, 2)
	p.Release(r)
}

// TestCloseMidFill stops the pool while a producer is in the middle of a row
// (held there by the test hook): the fill is abandoned, Close waits for the
// producer, and Close is idempotent.
func TestCloseMidFill(t *testing.T) {
	inFill := make(chan struct{})
	proceed := make(chan struct{})
	var once sync.Once
	p, err := newPool(smallConfig(1000, 4, 1, 1), testHooks{beforeChunk: func(id RowID, off int) {
		if off > 0 {
			once.Do(func() {
				close(inFill)
				<-proceed
			})
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	p.Activate(5, 0)
	<-inFill
	closed := make(chan error)
	go func() { closed <- p.Close() }()
	poll.Until(t, 20*time.Second, "Close to signal the producers", p.stopping.Load)
	close(proceed)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	s := p.Stats()
	if s.Produced != 0 || s.Filling != 0 || s.Ready != 0 {
		t.Errorf("after Close mid-fill: %+v", s)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Take(5, 0); !errors.Is(err, ErrClosed) {
		t.Errorf("Take after Close: %v", err)
	}
	if err := p.Warm(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("Warm after Close: %v", err)
	}
}

func TestWarmContext(t *testing.T) {
	block := make(chan struct{})
	p, err := newPool(smallConfig(100, 4, 1, 1), testHooks{beforeChunk: func(RowID, int) { <-block }})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	defer close(block)
	p.Activate(1, 0)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.Warm(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Warm with a cancelled context: %v", err)
	}
}

// TestConcurrentConsumers runs several consumers (each with its own streams,
// some sharing a seeded stream's key space) against three producers on a
// small pool, with Stats and Activate/Deactivate racing; run it with -race.
// It ends with Close while producers may be filling.
func TestConcurrentConsumers(t *testing.T) {
	steps := uint64(200)
	if testing.Short() || raceEnabled {
		steps = 60
	}
	p, err := New(smallConfig(515, 12, 3, 2))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for c := range 4 {
		wg.Go(func() {
			key := StreamKey(nil, 3, uint64(c))
			p.Activate(key, 0)
			defer p.Deactivate(key)
			want := make([]float32, 515)
			for step := range steps {
				r, err := p.Take(key, step)
				if errors.Is(err, ErrExhausted) {
					errs <- err
					return
				}
				fillAs(r.Form, key, step, want)
				for i := range want {
					if math.Float32bits(r.Values[i]) != math.Float32bits(want[i]) {
						errs <- errors.New("value mismatch")
						return
					}
				}
				if err := p.Release(r); err != nil {
					errs <- err
					return
				}
				_ = p.Stats()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	p.Activate(99, 0) // give producers work, then close under them
	p.Close()
	if s := p.Stats(); s.Taken != 4*steps {
		t.Errorf("stats %+v", s)
	}
}

func TestStreamKey(t *testing.T) {
	s1, s2 := uint64(42), uint64(42)
	if StreamKey(&s1, 1, 2) != StreamKey(&s2, 3, 4) {
		t.Error("seeded key depends on base or sequence")
	}
	if StreamKey(nil, 1, 2) == StreamKey(nil, 1, 3) || StreamKey(nil, 1, 2) == StreamKey(nil, 2, 2) {
		t.Error("unseeded keys collide")
	}
	if StreamKey(&s1, 0, 0) == StreamKey(nil, 42, 0) {
		t.Error("seeded and unseeded keys collide")
	}
	b, err := NewBase(bytes.NewReader([]byte{1, 2, 3, 4, 5, 6, 7, 8}))
	if err != nil || b != 0x0807060504030201 {
		t.Errorf("NewBase = %#x, %v", b, err)
	}
	if _, err := NewBase(bytes.NewReader([]byte{1})); err == nil {
		t.Error("NewBase accepted a short read")
	}
}

// TestProducerGivesWay: on one P, a goroutine made runnable while a
// producer fills a row runs before the row is finished: the producer
// gives way (here after every chunk) instead of holding the P until the
// scheduler preempts it. Without the yield the goroutine runs only once
// the producer has finished the row and parked.
func TestProducerGivesWay(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	const vocab, chunk = 64 * 64, 64
	type seen struct {
		row uint64
		off int
	}
	var at atomic.Pointer[seen] // where the producer is: set before each chunk
	ran := make(chan seen, 1)
	var once sync.Once
	p, err := newPool(smallConfig(vocab, 2, 1, 1), testHooks{beforeChunk: func(id RowID, off int) {
		at.Store(&seen{id.Row, off})
		if off == chunk {
			// Made runnable on the producer's P, mid-row.
			once.Do(func() { go func() { ran <- *at.Load() }() })
		}
	}, yieldAfter: time.Nanosecond}) // give way after every chunk
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	p.Activate(7, 0)
	got := <-ran
	if got.row != 0 || got.off >= vocab-chunk {
		t.Fatalf("the waiting goroutine ran when the producer was at row %d, offset %d: want row 0 before its last chunk (offset %d)",
			got.row, got.off, vocab-chunk)
	}
}

// TestYielderThreshold: a producer gives way only once it has filled for
// yieldAfter since it last did, and then starts counting again.
func TestYielderThreshold(t *testing.T) {
	start := time.Now()
	y := yielder{since: start, after: time.Hour}
	y.maybe()
	if y.since != start || y.yielded != 0 {
		t.Fatalf("gave way before yieldAfter: since moved by %v, yielded %v", y.since.Sub(start), y.yielded)
	}
	y.since = start.Add(-2 * time.Hour)
	y.maybe()
	if !y.since.After(start) || y.yielded < 0 {
		t.Fatalf("did not give way after yieldAfter: since %v (start %v), yielded %v", y.since, start, y.yielded)
	}
}

// TestActivateUntilStopsAtEnd: producers fill a stream's rows only up to its
// end; a row at or past the end is still handed out, inline; a stream that
// shares the key extends the end, and a stream already past its end gets
// nothing.
func TestActivateUntilStopsAtEnd(t *testing.T) {
	p := newTestPool(t, smallConfig(50, 8, 1, 4))
	p.ActivateUntil(1, 0, 2) // rows 0 and 1 only
	p.ActivateUntil(2, 5, 5) // already at its end
	if err := p.Warm(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s := p.Stats(); s.Ready != 2 || s.Produced != 2 {
		t.Fatalf("lookahead 4 within end 2: want 2 rows made, stats %+v", s)
	}
	for row := range uint64(3) {
		r, err := p.Take(1, row)
		if err != nil {
			t.Fatal(err)
		}
		checkRow(t, r, 1, row)
		if r.Inline != (row == 2) {
			t.Fatalf("row %d: inline %v, want %v", row, r.Inline, row == 2)
		}
		p.Release(r)
	}
	// A second reference with a later end extends it, and a third with an
	// earlier one does not shrink it: rows 3 and 4 are prefetched.
	p.ActivateUntil(1, 3, 5)
	p.ActivateUntil(1, 3, 4)
	if err := p.Warm(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s := p.Stats(); s.Ready != 2 || s.Produced != 4 {
		t.Fatalf("end extended to 5: want rows 3 and 4 made, stats %+v", s)
	}
	p.Deactivate(1)
	p.Deactivate(1)
	for row := uint64(3); row < 5; row++ {
		r, err := p.Take(1, row)
		if err != nil {
			t.Fatal(err)
		}
		if r.Inline {
			t.Fatalf("row %d made inline, want prefetched", row)
		}
		p.Release(r)
	}
}

// TestIdleProducersTouchSlots: once a stream has been activated, idle
// producers write every slot never used yet, and the rows handed out
// afterwards, from the slots touched, keep their values.
func TestIdleProducersTouchSlots(t *testing.T) {
	p := newTestPool(t, smallConfig(5000, 6, 1, 1))
	if s := p.Stats(); s.Untouched != 6 {
		t.Fatalf("new pool: %d slots untouched, want 6", s.Untouched)
	}
	p.Activate(3, 0)
	poll.Until(t, 20*time.Second, "every slot touched", func() bool { return p.Stats().Untouched == 0 })
	var held []Row
	for row := range uint64(5) { // more rows held than were ever filled
		r, err := p.Take(3, row)
		if err != nil {
			t.Fatal(err)
		}
		checkRow(t, r, 3, row)
		held = append(held, r)
	}
	for _, r := range held {
		if err := p.Release(r); err != nil {
			t.Fatal(err)
		}
	}
}
