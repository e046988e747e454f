package core

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/tpcoord/tpcoord/broadcast"
)

// chunkedRows returns a mirror that applied step 1, admitting sequences
// 1 ([10]) and 2 ([20 21]) whole and 3 (six tokens) fed up to 2, each
// with a block.
func chunkedRows(t *testing.T) *Mirror {
	t.Helper()
	m := NewMirror(1)
	mustApply(t, m, &broadcast.Step{Epoch: 1, Step: 1,
		Admitted: []broadcast.Admission{
			{Seq: 1, Prompt: []int32{10}}, {Seq: 2, Prompt: []int32{20, 21}}, {Seq: 3, Prompt: []int32{30, 31, 32, 33, 34, 35}},
		},
		Grants: []broadcast.Grant{{Seq: 1, Blocks: []uint32{0}}, {Seq: 2, Blocks: []uint32{1}}, {Seq: 3, Blocks: []uint32{2}}},
		Chunks: []broadcast.Chunk{{Seq: 3, Fed: 2}},
	})
	return m
}

// feds returns each row's Fed, in row order.
func feds(m *Mirror) []int {
	var out []int
	for _, r := range m.Rows() {
		out = append(out, r.Fed)
	}
	return out
}

// TestMirrorChunksAndGrants: grants extend the named tables, chunks set
// Fed, every other row is fed whole, and StepTokens is what the step fed.
func TestMirrorChunksAndGrants(t *testing.T) {
	m := chunkedRows(t)
	if got := feds(m); !slices.Equal(got, []int{1, 2, 2}) || m.StepTokens() != 5 || !m.Lookup(3).Prefilling() || m.Lookup(1).Prefilling() {
		t.Fatalf("after step 1: fed %v, step tokens %d", got, m.StepTokens())
	}
	// Step 2: 1 and 2 decode, 3 goes on to 4 of 6 with another block.
	mustApply(t, m, &broadcast.Step{Epoch: 1, Step: 2,
		Tokens: []broadcast.Token{{Seq: 1, Token: 11}, {Seq: 2, Token: 22}, {Seq: 3, Token: NoToken}},
		Grants: []broadcast.Grant{{Seq: 3, Blocks: []uint32{5}}},
		Chunks: []broadcast.Chunk{{Seq: 3, Fed: 4}},
	})
	if got := feds(m); !slices.Equal(got, []int{2, 3, 4}) || m.StepTokens() != 4 || len(m.Lookup(3).Output) != 0 {
		t.Fatalf("after step 2: fed %v, step tokens %d, sequence 3 output %v", got, m.StepTokens(), m.Lookup(3).Output)
	}
	if got := m.Lookup(3).Blocks; !slices.Equal(got, []BlockID{2, 5}) {
		t.Fatalf("sequence 3's table %v, want [2 5]", got)
	}
	// Step 3: no chunk, so 3 is fed whole (2 more); 1 is removed.
	mustApply(t, m, &broadcast.Step{Epoch: 1, Step: 3,
		Tokens:  []broadcast.Token{{Seq: 1, Token: 12}, {Seq: 2, Token: 23}, {Seq: 3, Token: NoToken}},
		Removed: []uint64{1},
	})
	if got := feds(m); !slices.Equal(got, []int{4, 6}) || m.StepTokens() != 1+2 {
		t.Fatalf("after step 3: fed %v (rows %v), step tokens %d", got, ids(m.Rows()), m.StepTokens())
	}
	// Step 4: 1 is admitted again, prefilled from 0 (its previous Fed
	// does not count), with a new table.
	mustApply(t, m, &broadcast.Step{Epoch: 1, Step: 4,
		Tokens:   []broadcast.Token{{Seq: 2, Token: 24}, {Seq: 3, Token: 31}},
		Admitted: []broadcast.Admission{{Seq: 1, Prompt: []int32{10}, Output: []int32{11, 12}}},
		Grants:   []broadcast.Grant{{Seq: 1, Blocks: []uint32{7}}},
		Chunks:   []broadcast.Chunk{{Seq: 1, Fed: 1}},
	})
	if got := feds(m); !slices.Equal(got, []int{5, 7, 1}) || m.StepTokens() != 1+1+1 {
		t.Fatalf("after step 4: fed %v (rows %v), step tokens %d", got, ids(m.Rows()), m.StepTokens())
	}
	if got := m.Lookup(1).Blocks; !slices.Equal(got, []BlockID{7}) {
		t.Fatalf("re-admitted sequence 1's table %v, want only its new block", got)
	}
}

// TestMirrorChunkDivergence: every step that does not fit the rows'
// tables and prefills is refused as divergence, naming the step and the
// sequence, and leaves the mirror as it was.
func TestMirrorChunkDivergence(t *testing.T) {
	tokens := func(third int32) []broadcast.Token {
		return []broadcast.Token{{Seq: 1, Token: 11}, {Seq: 2, Token: 22}, {Seq: 3, Token: third}}
	}
	ok := tokens(NoToken)
	adm4 := []broadcast.Admission{{Seq: 4, Prompt: []int32{1, 2, 3}}}
	for _, tc := range []struct {
		name string
		seq  uint64
		step broadcast.Step
	}{
		{"token for a prefilling row", 3, broadcast.Step{Tokens: tokens(7)}},
		{"token 0 for a prefilling row", 3, broadcast.Step{Tokens: tokens(0)}},
		{"grant for an unknown sequence", 9, broadcast.Step{Tokens: ok, Grants: []broadcast.Grant{{Seq: 9, Blocks: []uint32{4}}}}},
		{"grant for a removed row", 1, broadcast.Step{Tokens: ok, Removed: []uint64{1}, Grants: []broadcast.Grant{{Seq: 1, Blocks: []uint32{4}}}}},
		{"grant twice", 2, broadcast.Step{Tokens: ok, Grants: []broadcast.Grant{{Seq: 2, Blocks: []uint32{4}}, {Seq: 2, Blocks: []uint32{5}}}}},
		{"chunk for an unknown sequence", 9, broadcast.Step{Tokens: ok, Chunks: []broadcast.Chunk{{Seq: 9, Fed: 1}}}},
		{"chunk for a removed row", 3, broadcast.Step{Tokens: ok, Removed: []uint64{3}, Chunks: []broadcast.Chunk{{Seq: 3, Fed: 4}}}},
		{"chunk twice", 3, broadcast.Step{Tokens: ok, Chunks: []broadcast.Chunk{{Seq: 3, Fed: 3}, {Seq: 3, Fed: 4}}}},
		{"chunk feeding the whole length", 3, broadcast.Step{Tokens: ok, Chunks: []broadcast.Chunk{{Seq: 3, Fed: 6}}}},
		{"chunk feeding more than the length", 3, broadcast.Step{Tokens: ok, Chunks: []broadcast.Chunk{{Seq: 3, Fed: 1 << 31}}}},
		{"chunk feeding nothing more", 3, broadcast.Step{Tokens: ok, Chunks: []broadcast.Chunk{{Seq: 3, Fed: 2}}}},
		{"chunk going back", 3, broadcast.Step{Tokens: ok, Chunks: []broadcast.Chunk{{Seq: 3, Fed: 1}}}},
		{"chunk for a decoding row", 1, broadcast.Step{Tokens: ok, Chunks: []broadcast.Chunk{{Seq: 1, Fed: 1}}}},
		{"chunk of an admission feeding nothing", 4, broadcast.Step{Tokens: ok, Admitted: adm4, Chunks: []broadcast.Chunk{{Seq: 4, Fed: 0}}}},
		{"chunk of an admission feeding it whole", 4, broadcast.Step{Tokens: ok, Admitted: adm4, Chunks: []broadcast.Chunk{{Seq: 4, Fed: 3}}}},
		{"valid grants before a bad chunk", 9, broadcast.Step{Tokens: ok, Admitted: adm4,
			Grants: []broadcast.Grant{{Seq: 4, Blocks: []uint32{4}}, {Seq: 3, Blocks: []uint32{5}}},
			Chunks: []broadcast.Chunk{{Seq: 3, Fed: 4}, {Seq: 9, Fed: 1}}}},
		{"hit for a row not admitted", 2, broadcast.Step{Tokens: ok, Hits: []broadcast.Hit{{Seq: 2, Tokens: 1}}}},
		{"hit for an unknown sequence", 9, broadcast.Step{Tokens: ok, Admitted: adm4, Hits: []broadcast.Hit{{Seq: 9, Tokens: 1}}}},
		{"hit twice", 4, broadcast.Step{Tokens: ok, Admitted: adm4, Hits: []broadcast.Hit{{Seq: 4, Tokens: 1}, {Seq: 4, Tokens: 2}}}},
		{"hit of the whole length", 4, broadcast.Step{Tokens: ok, Admitted: adm4, Hits: []broadcast.Hit{{Seq: 4, Tokens: 3}}}},
		{"hit of more than the length", 4, broadcast.Step{Tokens: ok, Admitted: adm4, Hits: []broadcast.Hit{{Seq: 4, Tokens: 1 << 31}}}},
		{"hit of no tokens", 4, broadcast.Step{Tokens: ok, Admitted: adm4, Hits: []broadcast.Hit{{Seq: 4, Tokens: 0}}}},
		{"chunk of a hit row feeding nothing computed", 4, broadcast.Step{Tokens: ok, Admitted: adm4,
			Hits: []broadcast.Hit{{Seq: 4, Tokens: 2}}, Chunks: []broadcast.Chunk{{Seq: 4, Fed: 2}}}},
		{"hit of a removed row not admitted again", 1, broadcast.Step{Tokens: ok, Removed: []uint64{1}, Hits: []broadcast.Hit{{Seq: 1, Tokens: 1}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := chunkedRows(t)
			before := snap(m)
			st := tc.step
			st.Epoch, st.Step = 1, 2
			err := m.Apply(&st)
			if !errors.Is(err, ErrDiverged) {
				t.Fatalf("err = %v, want ErrDiverged", err)
			}
			if msg := err.Error(); !strings.Contains(msg, "step 2 ") || !strings.Contains(msg, fmt.Sprintf("sequence %d", tc.seq)) {
				t.Errorf("%q does not name step 2 and sequence %d", msg, tc.seq)
			}
			if !before.equal(snap(m)) {
				t.Fatalf("refused step changed the mirror:\n before %+v\n after  %+v", before, snap(m))
			}
			// The mirror is still usable: a correct step 2 applies.
			mustApply(t, m, &broadcast.Step{Epoch: 1, Step: 2, Tokens: ok, Chunks: []broadcast.Chunk{{Seq: 3, Fed: 5}}})
		})
	}
}

// TestMirrorHits: a hit gives an admitted row its cached prefix, which
// the step does not feed: StepTokens counts only the tokens computed, and
// a chunk of the row counts from the prefix.
func TestMirrorHits(t *testing.T) {
	m := chunkedRows(t)
	mustApply(t, m, &broadcast.Step{Epoch: 1, Step: 2,
		Tokens: []broadcast.Token{{Seq: 1, Token: 11}, {Seq: 2, Token: 22}, {Seq: 3, Token: NoToken}},
		Admitted: []broadcast.Admission{
			{Seq: 4, Prompt: []int32{20, 21, 22, 23, 24}},
			{Seq: 5, Prompt: []int32{30, 31, 32, 33, 34, 35, 36, 37, 38}},
		},
		Grants: []broadcast.Grant{{Seq: 4, Blocks: []uint32{1, 6}}, {Seq: 5, Blocks: []uint32{2, 7, 8}}},
		Chunks: []broadcast.Chunk{{Seq: 3, Fed: 4}, {Seq: 5, Fed: 6}},
		Hits:   []broadcast.Hit{{Seq: 4, Tokens: 2}, {Seq: 5, Tokens: 2}},
	})
	r4, r5 := m.Lookup(4), m.Lookup(5)
	if r4.Cached != 2 || r4.Fed != 5 || r5.Cached != 2 || r5.Fed != 6 || m.Lookup(3).Cached != 0 {
		t.Fatalf("sequence 4 cached %d fed %d, 5 cached %d fed %d", r4.Cached, r4.Fed, r5.Cached, r5.Fed)
	}
	// 1 and 2 decode one each, 3 goes from 2 to 4, 4 computes 3 of 5,
	// 5 computes 4 (2 to 6).
	if got := m.StepTokens(); got != 1+1+2+3+4 {
		t.Fatalf("step tokens %d, want 11: a cached prefix is not fed", got)
	}
	if !slices.Equal(r4.Blocks, []BlockID{1, 6}) {
		t.Fatalf("sequence 4's table %v", r4.Blocks)
	}
	// Later steps keep the prefix; the row is fed like any other.
	mustApply(t, m, &broadcast.Step{Epoch: 1, Step: 3,
		Tokens: []broadcast.Token{{Seq: 1, Token: 12}, {Seq: 2, Token: 23}, {Seq: 3, Token: NoToken}, {Seq: 4, Token: 25}, {Seq: 5, Token: NoToken}},
	})
	if r4 := m.Lookup(4); r4.Cached != 2 || r4.Fed != 6 || m.StepTokens() != 1+1+2+1+3 {
		t.Fatalf("step 3: sequence 4 cached %d fed %d, step tokens %d", r4.Cached, r4.Fed, m.StepTokens())
	}
}

// TestMirrorDigestCoversTables: two steps that differ only in a grant or
// a chunk leave different digests.
func TestMirrorDigestCoversTables(t *testing.T) {
	digest := func(g uint32, fed uint32) uint64 {
		m := chunkedRows(t)
		mustApply(t, m, &broadcast.Step{Epoch: 1, Step: 2, Tokens: []broadcast.Token{{Seq: 1, Token: 11}, {Seq: 2, Token: 22}, {Seq: 3, Token: NoToken}},
			Grants: []broadcast.Grant{{Seq: 3, Blocks: []uint32{g}}}, Chunks: []broadcast.Chunk{{Seq: 3, Fed: fed}}})
		return m.Digest()
	}
	if base := digest(5, 4); base == digest(6, 4) || base == digest(5, 5) {
		t.Fatal("the digest does not cover the step's grants and chunks")
	}
}

// TestMirrorDigestCoversHits: two steps that differ only in a hit leave
// different digests.
func TestMirrorDigestCoversHits(t *testing.T) {
	digest := func(cached uint32) uint64 {
		m := chunkedRows(t)
		mustApply(t, m, &broadcast.Step{Epoch: 1, Step: 2, Tokens: []broadcast.Token{{Seq: 1, Token: 11}, {Seq: 2, Token: 22}, {Seq: 3, Token: NoToken}},
			Admitted: []broadcast.Admission{{Seq: 4, Prompt: []int32{1, 2, 3, 4, 5}}}, Hits: []broadcast.Hit{{Seq: 4, Tokens: cached}}})
		return m.Digest()
	}
	if digest(2) == digest(4) {
		t.Fatal("the digest does not cover the step's hits")
	}
}
