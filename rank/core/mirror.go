package core

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"

	"github.com/tpcoord/tpcoord/broadcast"
)

// Ordering errors from Mirror.Apply. A duplicate is harmless and ignored by
// the driver; a gap or an unknown sequence means this rank can no longer be
// sure it is in lockstep.
var (
	ErrDuplicate  = errors.New("duplicate step")
	ErrGap        = errors.New("gap in step sequence")
	ErrStaleEpoch = errors.New("step from a stale epoch")
	// ErrFutureEpoch: epochs change when the world re-forms, which the
	// membership layer announces; a step cannot start a new epoch by itself.
	ErrFutureEpoch = errors.New("step from a future epoch")
	ErrDiverged    = errors.New("step does not fit this rank's batch")
)

// NoToken stands in a step's token list for a row that produced no token:
// its sampling failed, and the row is removed in the same step, or it was
// being prefilled, so it was not sampled, and it stays.
const NoToken int32 = -1

// Seq is one sequence in the batch as every rank mirrors it.
type Seq struct {
	ID     uint64
	Prompt []int32
	Output []int32
	// Fed is how many of the sequence's first tokens the workers' caches
	// hold once this step's forward pass has run: its length, or fewer
	// while its prompt is prefilled in chunks (its logits are then not
	// sampled).
	Fed int
	// Cached is the tokens of its prefix that it found in the KV cache
	// when admitted: held in the first blocks of its table, which it
	// shares and never writes.
	Cached int
	// Blocks is its KV block table (empty when memory is not scheduled):
	// block j holds its tokens [j×BlockSize, (j+1)×BlockSize).
	Blocks []BlockID
}

// Len is the sequence's length: prompt and output.
func (s *Seq) Len() int { return len(s.Prompt) + len(s.Output) }

// Prefilling reports whether the step's forward pass feeds only part of
// the sequence, so its logits are not sampled.
func (s *Seq) Prefilling() bool { return s.Fed < s.Len() }

// Last returns the last token of the sequence (prompt or output), or -1.
func (s *Seq) Last() int32 {
	if n := len(s.Output); n > 0 {
		return s.Output[n-1]
	}
	if n := len(s.Prompt); n > 0 {
		return s.Prompt[n-1]
	}
	return -1
}

// Mirror is one rank's copy of the batch. Every rank applies the same steps
// in the same order, so every Mirror holds the same rows in the same order
// and the same digest; the digest is what ranks compare to prove it.
type Mirror struct {
	epoch   uint32
	applied uint64 // last applied step; steps start at 1
	digest  uint64
	rows    []*Seq
	index   map[uint64]int
	scratch []byte
	// stepTokens: what the last applied step feeds (StepTokens).
	stepTokens int
}

// NewMirror returns an empty mirror for epoch.
func NewMirror(epoch uint32) *Mirror {
	return &Mirror{epoch: epoch, index: map[uint64]int{}}
}

// Epoch is the epoch whose steps the mirror applies.
func (m *Mirror) Epoch() uint32 { return m.epoch }

// Applied is the last step applied (0 before the first).
func (m *Mirror) Applied() uint64 { return m.applied }

// Digest summarizes every step applied so far: ranks in lockstep report
// the same digest at the same step.
func (m *Mirror) Digest() uint64 { return m.digest }

// Rows returns the batch in row order. The slice is the mirror's own; it is
// valid until the next Apply.
func (m *Mirror) Rows() []*Seq { return m.rows }

// Lookup returns the sequence with id, or nil.
func (m *Mirror) Lookup(id uint64) *Seq {
	if i, ok := m.index[id]; ok {
		return m.rows[i]
	}
	return nil
}

// Check reports whether s is the next step without applying it:
// ErrStaleEpoch, ErrDuplicate (already applied) or ErrGap (steps missing).
func (m *Mirror) Check(s *broadcast.Step) error {
	switch {
	case s.Epoch < m.epoch:
		return fmt.Errorf("%w: epoch %d, this rank is in epoch %d", ErrStaleEpoch, s.Epoch, m.epoch)
	case s.Epoch > m.epoch:
		return fmt.Errorf("%w: step %d of epoch %d, this rank is in epoch %d", ErrFutureEpoch, s.Step, s.Epoch, m.epoch)
	case s.Step <= m.applied:
		return fmt.Errorf("%w: step %d, already applied %d", ErrDuplicate, s.Step, m.applied)
	case s.Step > m.applied+1:
		return fmt.Errorf("%w: got step %d, expected %d (missing %d..%d)", ErrGap, s.Step, m.applied+1, m.applied+1, s.Step-1)
	}
	return nil
}

// Apply applies s: tokens are appended to their sequences (NoToken
// appends nothing), removed sequences leave the batch, admitted ones join
// at the end (with the cached prefix their hit names), grants extend the
// named rows' block tables, and every row's Fed becomes its length, or
// the Fed its chunk names. The step is validated completely before
// anything changes, so an error leaves the mirror as it was.
func (m *Mirror) Apply(s *broadcast.Step) error {
	if err := m.Check(s); err != nil {
		return err
	}
	if err := m.checkTokens(s); err != nil {
		return err
	}
	removed, admitted, err := m.checkMembers(s)
	if err != nil {
		return err
	}
	if err := m.checkGrants(s, removed, admitted); err != nil {
		return err
	}
	hits, err := m.checkHits(s, admitted)
	if err != nil {
		return err
	}
	if err := m.checkChunks(s, removed, admitted, hits); err != nil {
		return err
	}

	before := 0 // tokens the rows that stay had fed, and the cached ones
	for _, h := range s.Hits {
		before += int(h.Tokens)
	}
	for i, t := range s.Tokens {
		if t.Token != NoToken {
			m.rows[i].Output = append(m.rows[i].Output, t.Token)
		}
		if !removed[t.Seq] {
			before += m.rows[i].Fed
		}
	}
	if len(removed) > 0 {
		kept := m.rows[:0]
		for _, r := range m.rows {
			if !removed[r.ID] {
				kept = append(kept, r)
			}
		}
		clear(m.rows[len(kept):])
		m.rows = kept
	}
	for _, a := range s.Admitted {
		m.rows = append(m.rows, &Seq{ID: a.Seq, Prompt: a.Prompt, Output: slices.Clone(a.Output), Cached: hits[a.Seq]})
	}
	m.stepTokens = m.place(s) - before
	m.applied = s.Step
	m.digest = m.fold(s)
	return nil
}

// place indexes the rows, extends their tables by s's grants and sets
// their Fed by s's chunks, and returns the tokens the rows hold together.
func (m *Mirror) place(s *broadcast.Step) int {
	clear(m.index)
	for i, r := range m.rows {
		m.index[r.ID] = i
		r.Fed = r.Len()
	}
	for _, g := range s.Grants {
		r := m.rows[m.index[g.Seq]]
		for _, b := range g.Blocks {
			r.Blocks = append(r.Blocks, BlockID(b))
		}
	}
	for _, c := range s.Chunks {
		m.rows[m.index[c.Seq]].Fed = int(c.Fed)
	}
	fed := 0
	for _, r := range m.rows {
		fed += r.Fed
	}
	return fed
}

// StepTokens is how many tokens the last applied step feeds: the sum over
// its rows of what each row's Fed grew by (all of it for a row the step
// admitted, less its cached prefix). It is what the step's forward pass
// computes.
func (m *Mirror) StepTokens() int { return m.stepTokens }

// checkTokens checks that s carries one token per row, in row order, and
// none for a row that was being prefilled (it was not sampled).
func (m *Mirror) checkTokens(s *broadcast.Step) error {
	if len(s.Tokens) != len(m.rows) {
		return fmt.Errorf("%w: step %d carries %d tokens for a batch of %d rows", ErrDiverged, s.Step, len(s.Tokens), len(m.rows))
	}
	for i, t := range s.Tokens {
		if m.rows[i].ID != t.Seq {
			return fmt.Errorf("%w: step %d token %d is for sequence %d, row %d holds sequence %d", ErrDiverged, s.Step, i, t.Seq, i, m.rows[i].ID)
		}
		if r := m.rows[i]; r.Prefilling() && t.Token != NoToken {
			return fmt.Errorf("%w: step %d carries token %d for sequence %d, which was being prefilled (%d of %d tokens fed) and was not sampled",
				ErrDiverged, s.Step, t.Token, t.Seq, r.Fed, r.Len())
		}
	}
	return nil
}

// checkMembers checks s's removals and admissions, and returns them:
// the removed sequences, and the admitted ones with their index in
// s.Admitted.
func (m *Mirror) checkMembers(s *broadcast.Step) (map[uint64]bool, map[uint64]int, error) {
	removed := make(map[uint64]bool, len(s.Removed))
	for _, id := range s.Removed {
		if _, ok := m.index[id]; !ok || removed[id] {
			return nil, nil, fmt.Errorf("%w: step %d removes sequence %d, which is not in the batch", ErrDiverged, s.Step, id)
		}
		removed[id] = true
	}
	admitted := make(map[uint64]int, len(s.Admitted))
	for i, a := range s.Admitted {
		_, dup := admitted[a.Seq]
		if _, ok := m.index[a.Seq]; ok || dup {
			// Removed in this step too: the workers' view of a sequence
			// is its ID, so one step may not end it and start it again
			// (the scheduler re-admits a preempted request in a later
			// step).
			return nil, nil, fmt.Errorf("%w: step %d admits sequence %d, which is already in the batch (or removed by the same step)", ErrDiverged, s.Step, a.Seq)
		}
		admitted[a.Seq] = i
	}
	return removed, admitted, nil
}

// after describes sequence id in the batch s leaves: its length and its
// Fed before s (0 for a row s admits). ok is false if id is not in it.
func (m *Mirror) after(s *broadcast.Step, id uint64, removed map[uint64]bool, admitted map[uint64]int) (length, fed int, ok bool) {
	if i, in := admitted[id]; in {
		return len(s.Admitted[i].Prompt) + len(s.Admitted[i].Output), 0, true
	}
	i, in := m.index[id]
	if !in || removed[id] {
		return 0, 0, false
	}
	r := m.rows[i]
	length = r.Len()
	if s.Tokens[i].Token != NoToken {
		length++
	}
	return length, r.Fed, true
}

// checkGrants checks that every grant is for a row of the batch s leaves,
// at most one per sequence.
func (m *Mirror) checkGrants(s *broadcast.Step, removed map[uint64]bool, admitted map[uint64]int) error {
	seen := make(map[uint64]bool, len(s.Grants))
	for _, g := range s.Grants {
		if _, _, ok := m.after(s, g.Seq, removed, admitted); !ok {
			return fmt.Errorf("%w: step %d grants %d blocks to sequence %d, which is not in the batch", ErrDiverged, s.Step, len(g.Blocks), g.Seq)
		}
		if seen[g.Seq] {
			return fmt.Errorf("%w: step %d grants blocks to sequence %d twice", ErrDiverged, s.Step, g.Seq)
		}
		seen[g.Seq] = true
	}
	return nil
}

// checkHits checks that every hit names a row admitted in s, at most
// once, with a cached prefix of at least one token and fewer than the
// row's length (one token at least is computed, for its logits), and
// returns the cached tokens by sequence. Whether the prefix is a whole
// number of blocks is the worker's to check: the mirror does not know
// the block size.
func (m *Mirror) checkHits(s *broadcast.Step, admitted map[uint64]int) (map[uint64]int, error) {
	if len(s.Hits) == 0 {
		return nil, nil
	}
	hits := make(map[uint64]int, len(s.Hits))
	for _, h := range s.Hits {
		i, ok := admitted[h.Seq]
		if !ok {
			return nil, fmt.Errorf("%w: step %d has a prefix cache hit for sequence %d, which it does not admit", ErrDiverged, s.Step, h.Seq)
		}
		if _, dup := hits[h.Seq]; dup {
			return nil, fmt.Errorf("%w: step %d has two prefix cache hits for sequence %d", ErrDiverged, s.Step, h.Seq)
		}
		if n := len(s.Admitted[i].Prompt) + len(s.Admitted[i].Output); h.Tokens == 0 || int64(h.Tokens) >= int64(n) {
			return nil, fmt.Errorf("%w: step %d prefix cache hit of sequence %d holds %d of its %d tokens: a hit holds at least one, and fewer than all",
				ErrDiverged, s.Step, h.Seq, h.Tokens, n)
		}
		hits[h.Seq] = int(h.Tokens)
	}
	return hits, nil
}

// checkChunks checks that every chunk is for a row of the batch s leaves,
// at most one per sequence, and feeds it more than before (an admitted
// row's cached prefix counts as fed) but not all.
func (m *Mirror) checkChunks(s *broadcast.Step, removed map[uint64]bool, admitted map[uint64]int, hits map[uint64]int) error {
	seen := make(map[uint64]bool, len(s.Chunks))
	for _, c := range s.Chunks {
		length, fed, ok := m.after(s, c.Seq, removed, admitted)
		if _, in := admitted[c.Seq]; in {
			fed = hits[c.Seq]
		}
		switch {
		case !ok:
			return fmt.Errorf("%w: step %d has a chunk for sequence %d, which is not in the batch", ErrDiverged, s.Step, c.Seq)
		case seen[c.Seq]:
			return fmt.Errorf("%w: step %d has two chunks for sequence %d", ErrDiverged, s.Step, c.Seq)
		case int64(c.Fed) >= int64(length):
			return fmt.Errorf("%w: step %d chunk of sequence %d feeds %d tokens of %d: a chunk feeds fewer than all", ErrDiverged, s.Step, c.Seq, c.Fed, length)
		case int64(c.Fed) <= int64(fed):
			return fmt.Errorf("%w: step %d chunk of sequence %d feeds %d tokens, it had fed %d already", ErrDiverged, s.Step, c.Seq, c.Fed, fed)
		}
		seen[c.Seq] = true
	}
	return nil
}

// digestCodec encodes steps for the digest: job hash 0 and no key (a zero
// MAC), so the digest depends on the steps alone.
var digestCodec = broadcast.NewCodec(0, nil)

// fold mixes the canonical encoding of s into the rolling digest. Hashing
// the encoding rather than the received bytes makes rank 0, which applies
// its own step without decoding it, agree with everyone else.
func (m *Mirror) fold(s *broadcast.Step) uint64 {
	m.scratch = digestCodec.AppendStep(m.scratch[:0], s)
	h := fnv.New64a()
	var prev [8]byte
	binary.LittleEndian.PutUint64(prev[:], m.digest)
	h.Write(prev[:])
	h.Write(m.scratch)
	return h.Sum64()
}
