package core

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/tpcoord/tpcoord/broadcast"
)

// snapshot is everything Apply may change, deep-copied.
type snapshot struct {
	epoch      uint32
	applied    uint64
	digest     uint64
	stepTokens int
	rows       []Seq
}

func snap(m *Mirror) snapshot {
	s := snapshot{epoch: m.Epoch(), applied: m.Applied(), digest: m.Digest(), stepTokens: m.StepTokens()}
	for _, r := range m.Rows() {
		s.rows = append(s.rows, Seq{ID: r.ID, Prompt: slices.Clone(r.Prompt), Output: slices.Clone(r.Output), Fed: r.Fed, Cached: r.Cached, Blocks: slices.Clone(r.Blocks)})
	}
	return s
}

func (s snapshot) equal(o snapshot) bool {
	return s.epoch == o.epoch && s.applied == o.applied && s.digest == o.digest && s.stepTokens == o.stepTokens &&
		slices.EqualFunc(s.rows, o.rows, func(a, b Seq) bool {
			return a.ID == b.ID && slices.Equal(a.Prompt, b.Prompt) && slices.Equal(a.Output, b.Output) &&
				a.Fed == b.Fed && a.Cached == b.Cached && slices.Equal(a.Blocks, b.Blocks)
		})
}

func ids(rows []*Seq) []uint64 {
	var out []uint64
	for _, r := range rows {
		out = append(out, r.ID)
	}
	return out
}

func mustApply(t *testing.T, m *Mirror, s *broadcast.Step) {
	t.Helper()
	if err := m.Apply(s); err != nil {
		t.Fatalf("Apply(step %d): %v", s.Step, err)
	}
}

// threeRows returns a mirror in epoch 1 that applied step 1, admitting
// sequences 1, 2 and 3.
func threeRows(t *testing.T) *Mirror {
	t.Helper()
	m := NewMirror(1)
	mustApply(t, m, &broadcast.Step{Epoch: 1, Step: 1, Admitted: []broadcast.Admission{
		{Seq: 1, Prompt: []int32{10}}, {Seq: 2, Prompt: []int32{20, 21}}, {Seq: 3, Prompt: []int32{30}},
	}})
	return m
}

func tokensFor(seqs ...uint64) []broadcast.Token {
	var out []broadcast.Token
	for _, s := range seqs {
		out = append(out, broadcast.Token{Seq: s, Token: int32(100 + s)})
	}
	return out
}

func TestMirrorApply(t *testing.T) {
	m := threeRows(t)
	if got := ids(m.Rows()); !slices.Equal(got, []uint64{1, 2, 3}) {
		t.Fatalf("rows %v after admission", got)
	}
	if m.Applied() != 1 || m.Digest() == 0 {
		t.Fatalf("applied %d, digest %x", m.Applied(), m.Digest())
	}
	// Step 2: a token per row, remove 2, admit 4 at the end.
	mustApply(t, m, &broadcast.Step{Epoch: 1, Step: 2, Tokens: tokensFor(1, 2, 3), Removed: []uint64{2},
		Admitted: []broadcast.Admission{{Seq: 4, Prompt: []int32{40}}}})
	if got := ids(m.Rows()); !slices.Equal(got, []uint64{1, 3, 4}) {
		t.Fatalf("rows %v, want [1 3 4] (removal keeps order, admissions at the end)", got)
	}
	if s := m.Lookup(1); s == nil || !slices.Equal(s.Output, []int32{101}) || s.Last() != 101 {
		t.Fatalf("sequence 1: %+v", s)
	}
	if m.Lookup(2) != nil {
		t.Fatal("removed sequence 2 still found")
	}
	if s := m.Lookup(4); s == nil || s.Last() != 40 || len(s.Output) != 0 {
		t.Fatalf("admitted sequence 4: %+v", s)
	}
	// Removal of the last row and of everything.
	mustApply(t, m, &broadcast.Step{Epoch: 1, Step: 3, Tokens: tokensFor(1, 3, 4), Removed: []uint64{4, 1, 3}})
	if len(m.Rows()) != 0 || m.Lookup(1) != nil || m.Lookup(3) != nil {
		t.Fatalf("rows %v after removing all", ids(m.Rows()))
	}
	// An empty step is a valid step.
	mustApply(t, m, &broadcast.Step{Epoch: 1, Step: 4})
	if m.Applied() != 4 {
		t.Fatalf("applied %d", m.Applied())
	}
}

func TestMirrorNoTokenNotAppended(t *testing.T) {
	m := threeRows(t)
	mustApply(t, m, &broadcast.Step{Epoch: 1, Step: 2, Tokens: []broadcast.Token{
		{Seq: 1, Token: 7}, {Seq: 2, Token: NoToken}, {Seq: 3, Token: 0},
	}, Removed: []uint64{2}})
	if got := m.Lookup(1).Output; !slices.Equal(got, []int32{7}) {
		t.Errorf("seq 1 output %v", got)
	}
	if got := m.Lookup(3).Output; !slices.Equal(got, []int32{0}) {
		t.Errorf("seq 3 output %v (token 0 is a real token)", got)
	}
	// NoToken for a row that stays (not removed) still appends nothing.
	mustApply(t, m, &broadcast.Step{Epoch: 1, Step: 3, Tokens: []broadcast.Token{{Seq: 1, Token: NoToken}, {Seq: 3, Token: 5}}})
	if got := m.Lookup(1).Output; !slices.Equal(got, []int32{7}) {
		t.Errorf("seq 1 output %v after NoToken", got)
	}
}

func TestSeqLast(t *testing.T) {
	for _, tc := range []struct {
		s    Seq
		want int32
	}{
		{Seq{}, -1},
		{Seq{Prompt: []int32{1, 2}}, 2},
		{Seq{Prompt: []int32{1, 2}, Output: []int32{9}}, 9},
		{Seq{Output: []int32{4}}, 4},
	} {
		if got := tc.s.Last(); got != tc.want {
			t.Errorf("%+v.Last() = %d, want %d", tc.s, got, tc.want)
		}
	}
}

func TestMirrorOrdering(t *testing.T) {
	for _, tc := range []struct {
		name    string
		step    broadcast.Step
		want    error
		wantMsg string
	}{
		{"duplicate of last", broadcast.Step{Epoch: 2, Step: 3}, ErrDuplicate, "already applied 3"},
		{"duplicate of older", broadcast.Step{Epoch: 2, Step: 1}, ErrDuplicate, ""},
		{"gap of one", broadcast.Step{Epoch: 2, Step: 5}, ErrGap, "missing 4..4"},
		{"gap of several", broadcast.Step{Epoch: 2, Step: 9}, ErrGap, "missing 4..8"},
		{"stale epoch", broadcast.Step{Epoch: 1, Step: 4}, ErrStaleEpoch, "epoch 1"},
		{"stale epoch, old step", broadcast.Step{Epoch: 0, Step: 1}, ErrStaleEpoch, ""},
		{"future epoch", broadcast.Step{Epoch: 3, Step: 1}, ErrFutureEpoch, "epoch 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := NewMirror(2)
			for k := uint64(1); k <= 3; k++ {
				mustApply(t, m, &broadcast.Step{Epoch: 2, Step: k})
			}
			before := snap(m)
			if err := m.Check(&tc.step); !errors.Is(err, tc.want) {
				t.Fatalf("Check: err = %v, want %v", err, tc.want)
			}
			err := m.Apply(&tc.step)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Apply: err = %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.wantMsg) {
				t.Errorf("error %q does not say %q", err, tc.wantMsg)
			}
			if !before.equal(snap(m)) {
				t.Errorf("refused step changed the mirror")
			}
		})
	}
	m := NewMirror(2)
	if err := m.Check(&broadcast.Step{Epoch: 2, Step: 1}); err != nil {
		t.Errorf("Check of the first step of a fresh mirror: %v", err)
	}
	if err := m.Check(&broadcast.Step{Epoch: 2, Step: 0}); !errors.Is(err, ErrDuplicate) {
		t.Errorf("step 0 on a fresh mirror: %v, want ErrDuplicate (steps start at 1)", err)
	}
}

func TestMirrorDivergence(t *testing.T) {
	for _, tc := range []struct {
		name string
		step broadcast.Step
	}{
		{"fewer tokens than rows", broadcast.Step{Tokens: tokensFor(1, 2)}},
		{"more tokens than rows", broadcast.Step{Tokens: tokensFor(1, 2, 3, 4)}},
		{"no tokens", broadcast.Step{}},
		{"token for wrong sequence", broadcast.Step{Tokens: tokensFor(1, 3, 2)}},
		{"token for unknown sequence", broadcast.Step{Tokens: tokensFor(1, 2, 9)}},
		{"removal of unknown sequence", broadcast.Step{Tokens: tokensFor(1, 2, 3), Removed: []uint64{9}}},
		{"removal twice", broadcast.Step{Tokens: tokensFor(1, 2, 3), Removed: []uint64{2, 2}}},
		{"admission of existing sequence", broadcast.Step{Tokens: tokensFor(1, 2, 3), Admitted: []broadcast.Admission{{Seq: 3, Prompt: []int32{1}}}}},
		{"admission of the same sequence twice", broadcast.Step{Tokens: tokensFor(1, 2, 3), Admitted: []broadcast.Admission{{Seq: 5, Prompt: []int32{1}}, {Seq: 5, Prompt: []int32{2}}}}},
		{"valid parts before a bad removal", broadcast.Step{Tokens: tokensFor(1, 2, 3), Removed: []uint64{1, 7},
			Admitted: []broadcast.Admission{{Seq: 4, Prompt: []int32{1}}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := threeRows(t)
			mustApply(t, m, &broadcast.Step{Epoch: 1, Step: 2, Tokens: tokensFor(1, 2, 3)})
			before := snap(m)
			st := tc.step
			st.Epoch, st.Step = 1, 3
			if err := m.Apply(&st); !errors.Is(err, ErrDiverged) {
				t.Fatalf("err = %v, want ErrDiverged", err)
			}
			if !before.equal(snap(m)) {
				t.Fatalf("refused step changed the mirror:\n before %+v\n after  %+v", before, snap(m))
			}
			// The mirror is still usable: the correct step 3 applies.
			mustApply(t, m, &broadcast.Step{Epoch: 1, Step: 3, Tokens: tokensFor(1, 2, 3)})
		})
	}
}

// TestMirrorReadmitAfterRemoval: a sequence removed by a step may come
// back in a later step, starting over; the same step may not end it and
// start it again (the workers know a sequence by its ID alone).
func TestMirrorReadmitAfterRemoval(t *testing.T) {
	m := threeRows(t)
	err := m.Apply(&broadcast.Step{Epoch: 1, Step: 2, Tokens: tokensFor(1, 2, 3), Removed: []uint64{1},
		Admitted: []broadcast.Admission{{Seq: 1, Prompt: []int32{99}}}})
	if !errors.Is(err, ErrDiverged) {
		t.Fatalf("removed and admitted in one step: %v, want ErrDiverged", err)
	}
	mustApply(t, m, &broadcast.Step{Epoch: 1, Step: 2, Tokens: tokensFor(1, 2, 3), Removed: []uint64{1}})
	mustApply(t, m, &broadcast.Step{Epoch: 1, Step: 3, Tokens: tokensFor(2, 3), Admitted: []broadcast.Admission{{Seq: 1, Prompt: []int32{99}}}})
	if got := ids(m.Rows()); !slices.Equal(got, []uint64{2, 3, 1}) {
		t.Fatalf("rows %v", got)
	}
	if s := m.Lookup(1); len(s.Output) != 0 || s.Last() != 99 {
		t.Fatalf("re-admitted sequence %+v", s)
	}
}

func digestSteps() []*broadcast.Step {
	return []*broadcast.Step{
		{Epoch: 1, Step: 1, Admitted: []broadcast.Admission{{Seq: 1, Prompt: []int32{1, 2}}, {Seq: 2, Prompt: []int32{3}}}},
		{Epoch: 1, Step: 2, Tokens: tokensFor(1, 2)},
		{Epoch: 1, Step: 3, Tokens: tokensFor(1, 2), Removed: []uint64{1}},
		{Epoch: 1, Step: 4, Tokens: tokensFor(2), Admitted: []broadcast.Admission{{Seq: 3, Prompt: []int32{5}}}},
		{Epoch: 1, Step: 5, Tokens: tokensFor(2, 3), Removed: []uint64{2, 3}},
	}
}

func TestMirrorDigest(t *testing.T) {
	codec := broadcast.NewCodec(broadcast.JobHash("digest"), nil)
	a, b := NewMirror(1), NewMirror(1)
	seen := map[uint64]bool{0: true}
	for _, s := range digestSteps() {
		mustApply(t, a, s)
		// b gets the step through the wire, as a follower does.
		var dec broadcast.Step
		if err := codec.DecodeStep(codec.AppendStep(nil, s), &dec); err != nil {
			t.Fatal(err)
		}
		mustApply(t, b, &dec)
		if a.Digest() != b.Digest() {
			t.Fatalf("step %d: digests %x and %x differ for the same steps", s.Step, a.Digest(), b.Digest())
		}
		if seen[a.Digest()] {
			t.Fatalf("step %d: digest %x repeats an earlier one", s.Step, a.Digest())
		}
		seen[a.Digest()] = true
	}

	final := a.Digest()
	for _, tc := range []struct {
		name   string
		change func([]*broadcast.Step)
	}{
		{"other token", func(s []*broadcast.Step) { s[1].Tokens[0].Token++ }},
		{"other prompt", func(s []*broadcast.Step) { s[0].Admitted[0].Prompt[1] = 9 }},
		{"other epoch", func(s []*broadcast.Step) {
			for _, st := range s {
				st.Epoch = 2
			}
		}},
		{"NoToken instead of a token", func(s []*broadcast.Step) { s[4].Tokens[1].Token = NoToken }},
		{"other removal order", func(s []*broadcast.Step) { s[4].Removed = []uint64{3, 2} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			steps := digestSteps()
			tc.change(steps)
			c := NewMirror(steps[0].Epoch)
			for _, s := range steps {
				mustApply(t, c, s)
			}
			if c.Digest() == final {
				t.Fatalf("different steps gave the same digest %x", final)
			}
		})
	}
}
