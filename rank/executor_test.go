package rank

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

func newSynthetic(t *testing.T, vocab int, eos int32, logits bool) *Synthetic {
	t.Helper()
	ex, err := NewSynthetic(SyntheticConfig{Vocab: vocab, EOS: eos, Logits: logits})
	if err != nil {
		t.Fatal(err)
	}
	return ex
}

func argmax(row []float32) int32 {
	best := 0
	for i, v := range row {
		if v > row[best] {
			best = i
		}
	}
	return int32(best)
}

func TestNewSyntheticValidates(t *testing.T) {
	for _, tc := range []struct {
		cfg  SyntheticConfig
		want string
	}{
		{SyntheticConfig{Vocab: 4, EOS: -1}, "vocab"},
		{SyntheticConfig{Vocab: 0, EOS: -1}, "vocab"},
		{SyntheticConfig{Vocab: 64, EOS: 64}, "eos"},
	} {
		if _, err := NewSynthetic(tc.cfg); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("NewSynthetic(%+v) = %v, want an error naming %s", tc.cfg, err, tc.want)
		}
	}
	if _, err := NewSynthetic(SyntheticConfig{Vocab: 5, EOS: 4}); err != nil {
		t.Errorf("smallest valid config: %v", err)
	}
}

func TestSyntheticDeterministicAndRowIndependent(t *testing.T) {
	const vocab = 512
	a, b := newSynthetic(t, vocab, 1, true), newSynthetic(t, vocab, 1, true)
	rows := []*Seq{
		{ID: 1, Prompt: []int32{3, 4, 5}},
		{ID: 2, Prompt: []int32{7}, Output: []int32{8, 9}},
		{ID: 3, Prompt: []int32{100, 200}, Output: []int32{300}},
	}
	ctx := context.Background()
	batch, err := a.Forward(ctx, Batch{Step: 1, Rows: rows})
	if err != nil {
		t.Fatal(err)
	}
	if len(batch) != len(rows)*vocab {
		t.Fatalf("%d logits for %d rows of vocab %d", len(batch), len(rows), vocab)
	}
	batch = slices.Clone(batch) // the executor reuses its buffer
	again, err := b.Forward(ctx, Batch{Step: 9, Rows: rows})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(batch, again) {
		t.Fatal("two executors gave different logits for the same rows")
	}
	// Each row alone, and in another order, gives the same logits.
	for i, r := range rows {
		alone, err := a.Forward(ctx, Batch{Step: 2, Rows: []*Seq{r}})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(alone, batch[i*vocab:(i+1)*vocab]) {
			t.Fatalf("row %d's logits depend on the rest of the batch", i)
		}
	}
	rev, err := a.Forward(ctx, Batch{Step: 3, Rows: []*Seq{rows[2], rows[0]}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rev[:vocab], batch[2*vocab:]) || !slices.Equal(rev[vocab:], batch[:vocab]) {
		t.Fatal("reordering the batch changed a row's logits")
	}
	for _, v := range batch {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			t.Fatalf("non-finite logit %v", v)
		}
	}
	// Rows with different last tokens get different likely tokens.
	if argmax(batch[:vocab]) == argmax(batch[vocab:2*vocab]) && argmax(batch[vocab:2*vocab]) == argmax(batch[2*vocab:]) {
		t.Error("every row has the same argmax")
	}
}

// TestSyntheticForwardMatchesRow: Forward, which fills rows in chunks and
// gives way between them, writes each row as Row does (the worker's
// logits), for a vocabulary of several chunks and a partial last one.
func TestSyntheticForwardMatchesRow(t *testing.T) {
	const vocab = 2*fillChunk + 77
	ex := newSynthetic(t, vocab, 1, true)
	rows := []*Seq{{ID: 1, Prompt: []int32{3, 4, 5}}, {ID: 2, Prompt: []int32{7}, Output: []int32{8, 9}}}
	got, err := ex.Forward(t.Context(), Batch{Step: 1, Rows: rows})
	if err != nil {
		t.Fatal(err)
	}
	want := make([]float32, vocab)
	for i, r := range rows {
		ex.Row(r, want)
		if !slices.Equal(got[i*vocab:(i+1)*vocab], want) {
			t.Fatalf("row %d: Forward's logits differ from Row's", i)
		}
	}
}

func TestSyntheticFollowerHasNoLogits(t *testing.T) {
	ex := newSynthetic(t, 64, 1, false)
	logits, err := ex.Forward(context.Background(), Batch{Step: 1, Rows: []*Seq{{ID: 1, Prompt: []int32{1}}}})
	if err != nil || logits != nil {
		t.Fatalf("follower Forward = %v, %v; want nil, nil", logits, err)
	}
	if ex.Vocab() != 64 || ex.Close() != nil {
		t.Fatal("Vocab/Close")
	}
}

func TestSyntheticForwardHonoursContext(t *testing.T) {
	ex, err := NewSynthetic(SyntheticConfig{Vocab: 64, EOS: -1, ForwardTime: time.Hour, Logits: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := ex.Forward(ctx, Batch{Step: 1, Rows: []*Seq{{ID: 1, Prompt: []int32{1}}}}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Forward with a cancelled context: %v", err)
	}
}

// TestSyntheticEOSBecomesArgmax decodes greedily: every prompt reaches EOS,
// within the documented 8..47 tokens.
func TestSyntheticEOSBecomesArgmax(t *testing.T) {
	const vocab, eos = 512, 3
	ex := newSynthetic(t, vocab, eos, true)
	row := make([]float32, vocab)
	lengths := map[int]bool{}
	for p := range int32(30) {
		s := &Seq{ID: 1, Prompt: []int32{p, p * 7 % vocab}}
		n := 0
		for ; n < 60; n++ {
			ex.Row(s, row)
			tok := argmax(row)
			if tok == eos {
				break
			}
			s.Output = append(s.Output, tok)
		}
		if n < 8-1 || n > 47 {
			t.Errorf("prompt %v: EOS after %d tokens, want 8..47", s.Prompt, n)
		}
		lengths[n] = true
	}
	if len(lengths) < 3 {
		t.Errorf("EOS came after the same few lengths for every prompt: %v", lengths)
	}
	// Without EOS the decode never stops on token -1 or anything odd.
	noEOS := newSynthetic(t, vocab, -1, true)
	s := &Seq{ID: 1, Prompt: []int32{1}}
	for range 100 {
		noEOS.Row(s, row)
		tok := argmax(row)
		if tok < 0 || tok >= vocab {
			t.Fatalf("token %d outside the vocabulary", tok)
		}
		s.Output = append(s.Output, tok)
	}
}

func TestGreedy(t *testing.T) {
	const vocab = 4
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	ninf := float32(math.Inf(-1))
	logits := []float32{
		0, 3, 1, 2, // row 0: argmax 1
		5, 5, 1, 5, // row 1: tie → lowest ID
		0, nan, 9, 1, // row 2: NaN
		-1, ninf, -2, -0.5, // row 3: -Inf is a masked token, argmax 3
		1, 2, inf, 0, // row 4: +Inf
		ninf, ninf, ninf, ninf, // row 5: nothing possible
		-3, -2, -1, -1e30, // row 6: all negative
	}
	rows := make([]*Seq, len(logits)/vocab)
	for i := range rows {
		rows[i] = &Seq{ID: uint64(100 + i)}
	}
	tokens := make([]int32, len(rows))
	errs := make([]error, len(rows))
	Greedy{}.Pick(rows, make([]*Request, len(rows)), logits, vocab, tokens, errs)
	want := []int32{1, 0, -1, 3, -1, -1, 2}
	for i := range rows {
		bad := i == 2 || i == 4 || i == 5
		if bad {
			if errs[i] == nil {
				t.Errorf("row %d: no error", i)
				continue
			}
			msg := errs[i].Error()
			if !strings.Contains(msg, "row "+string(rune('0'+i))) || !strings.Contains(msg, "sequence 10"+string(rune('0'+i))) {
				t.Errorf("row %d: error %q does not name the row and sequence", i, msg)
			}
			if tokens[i] != NoToken {
				t.Errorf("row %d: token %d with an error, want NoToken", i, tokens[i])
			}
			continue
		}
		if errs[i] != nil {
			t.Errorf("row %d: unexpected error %v", i, errs[i])
		}
		if tokens[i] != want[i] {
			t.Errorf("row %d: token %d, want %d", i, tokens[i], want[i])
		}
	}
}

// TestWaitUntil: WaitUntil never returns before its deadline, on either
// side of the timer's grain, and returns the context's error once the
// context is done.
func TestWaitUntil(t *testing.T) {
	for _, d := range []time.Duration{-time.Millisecond, 0, 300 * time.Microsecond, timerGrain, 3*timerGrain + 250*time.Microsecond} {
		deadline := time.Now().Add(d)
		if err := WaitUntil(context.Background(), deadline); err != nil {
			t.Fatalf("WaitUntil(+%v) = %v", d, err)
		}
		if early := time.Until(deadline); early > 0 {
			t.Errorf("WaitUntil(+%v) returned %v before its deadline", d, early)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- WaitUntil(ctx, time.Now().Add(time.Hour)) }()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("WaitUntil after cancel = %v, want context.Canceled", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("WaitUntil still waiting 30s after its context was cancelled")
	}
	if err := WaitUntil(ctx, time.Now().Add(time.Millisecond/2)); !errors.Is(err, context.Canceled) {
		t.Fatalf("WaitUntil on a done context = %v, want context.Canceled", err)
	}
}
