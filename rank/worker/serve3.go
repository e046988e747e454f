package worker

import (
	"fmt"
	"slices"

	"github.com/tpcoord/tpcoord/rank"
)

// paged is what a version 3 worker holds: each sequence's block table and
// length, and which blocks live tables hold. With a pool it keeps, as its
// "KV", the token written at each slot (table[i/bs]·bs + i%bs) of the
// blocks, and a sampled row's logits come from the history read back
// through its table, cached prefix included, as a real runtime attends
// over the keys and values its table points at. Without a pool (0 blocks)
// it keeps each sequence's tokens as they were sent.
type paged struct {
	blockSize, blocks uint32
	seqs              map[uint64]*pagedSeq
	refs              map[uint32]int32 // block → live tables holding it
	// kv holds each block's slots written since the pool started: slots
	// [0, len) (a sequence writes a block's slots in order from its first,
	// and never the slots before where it starts).
	kv map[uint32][]int32
	// Scratch: the sequences of the FORWARD's rows, a table sorted, and
	// the state of sequences freed, for new ones to reuse.
	rows   []*pagedSeq
	sorted []uint32
	spare  []*pagedSeq
}

type pagedSeq struct {
	length uint64   // tokens held: its cached prefix and every token sent
	table  []uint32 // its block table
	tokens []int32  // no pool: the tokens sent
	hist   []int32  // pool: its history read back through the table
	view   rank.Seq // the tokens as the model takes them, when sampled
}

func newPaged(blockSize, blocks uint32) paged {
	return paged{blockSize: blockSize, blocks: blocks, seqs: map[uint64]*pagedSeq{}, refs: map[uint32]int32{}, kv: map[uint32][]int32{}}
}

// apply3 decodes a version 3 FORWARD and applies it as a forward pass
// does: finished ids free their sequences and blocks first (a freed block
// may join another table in the same FORWARD); then every row joins its
// sequence and brings its blocks; then every row writes its tokens (a
// block it writes must be in no other table, as the tables are after the
// whole FORWARD); then every row reads its history back. The rows it
// returns are the batch's sampled rows, nil for the others. After it the
// worker holds exactly the batch's rows.
func (s *server) apply3(body []byte) (uint64, []*rank.Seq, error) {
	f, p := &s.fwd2, &s.paged
	if err := decodeForwardDelta(body, s.hello.MaxBatch, ProtocolV3, f); err != nil {
		return 0, nil, err
	}
	for _, id := range f.Finished {
		p.free(id) // an id this worker does not hold is ignored
	}
	if err := p.run(f.Rows); err != nil {
		return 0, nil, fmt.Errorf("step %d: %w", f.Step, err)
	}
	s.batch = s.batch[:0]
	for i := range f.Rows {
		seq, err := p.feed(p.rows[i], &f.Rows[i], i)
		if err != nil {
			return 0, nil, fmt.Errorf("step %d: %w", f.Step, err)
		}
		s.batch = append(s.batch, seq)
	}
	return f.Step, s.batch, nil
}

// run joins every row to its sequence (p.rows), then writes their tokens.
func (p *paged) run(rows []row2) error {
	p.rows = p.rows[:0]
	for i := range rows {
		q, err := p.join(&rows[i], i)
		if err != nil {
			return err
		}
		p.rows = append(p.rows, q)
	}
	if len(p.seqs) > len(rows) {
		return fmt.Errorf("this worker holds %d sequences, the batch has %d rows: the FORWARD does not finish the sequences that left", len(p.seqs), len(rows))
	}
	for i := range rows {
		if err := p.write(p.rows[i], &rows[i], i); err != nil {
			return err
		}
	}
	return nil
}

func (p *paged) free(id uint64) {
	q, ok := p.seqs[id]
	if !ok {
		return
	}
	for _, b := range q.table {
		if p.refs[b]--; p.refs[b] == 0 {
			delete(p.refs, b)
		}
	}
	delete(p.seqs, id)
	*q = pagedSeq{table: q.table[:0], tokens: q.tokens[:0], hist: q.hist[:0]}
	p.spare = append(p.spare, q)
}

// newSeq is a sequence holding length tokens, reusing a freed one's state.
func (p *paged) newSeq(length uint64) *pagedSeq {
	if n := len(p.spare); n > 0 {
		q := p.spare[n-1]
		p.spare = p.spare[:n-1]
		q.length = length
		return q
	}
	return &pagedSeq{length: length}
}

// join checks row i against what is held and appends its blocks to its
// sequence's table (a NEW row's sequence starts holding its cached prefix).
func (p *paged) join(r *row2, i int) (*pagedSeq, error) {
	q, known := p.seqs[r.ID]
	switch {
	case r.New && known:
		return nil, fmt.Errorf("row %d: sequence %d is flagged NEW but this worker already holds it", i, r.ID)
	case r.New:
		if err := p.checkPrefix(r, i); err != nil {
			return nil, err
		}
		q = p.newSeq(uint64(r.Pos))
		p.seqs[r.ID] = q
	case !known:
		return nil, fmt.Errorf("row %d: sequence %d is not flagged NEW but this worker does not hold it", i, r.ID)
	case uint64(r.Pos) != q.length:
		return nil, fmt.Errorf("row %d: sequence %d continues at position %d, this worker holds %d of its tokens", i, r.ID, r.Pos, q.length)
	}
	if err := p.grow(q, r, i); err != nil {
		return nil, err
	}
	q.length += uint64(len(r.Tokens))
	return q, nil
}

// checkPrefix checks where a NEW row starts: at 0, or after a cached
// prefix of whole blocks, which only a pool can hold.
func (p *paged) checkPrefix(r *row2, i int) error {
	switch {
	case r.Pos == 0:
		return nil
	case p.blocks == 0:
		return fmt.Errorf("row %d: sequence %d: NEW at position %d, and this worker keeps no paged cache (0 blocks) to hold a cached prefix", i, r.ID, r.Pos)
	case r.Pos%p.blockSize != 0:
		return fmt.Errorf("row %d: sequence %d: NEW at position %d, not a multiple of the block size %d", i, r.ID, r.Pos, p.blockSize)
	}
	return nil
}

// grow appends row i's blocks to q's table: each must be in the pool and
// not in the table already, and the table must then cover the row's last
// token. Another live table may hold them too (feed checks the ones the
// row writes).
func (p *paged) grow(q *pagedSeq, r *row2, i int) error {
	if p.blocks == 0 {
		if len(r.Blocks) > 0 {
			return fmt.Errorf("row %d: sequence %d brings %d blocks, this worker keeps no paged cache (0 blocks)", i, r.ID, len(r.Blocks))
		}
		return nil
	}
	for _, b := range r.Blocks {
		if b >= p.blocks {
			return fmt.Errorf("row %d: sequence %d: block %d is not below this worker's %d blocks", i, r.ID, b, p.blocks)
		}
		p.refs[b]++
		q.table = append(q.table, b)
	}
	if len(r.Blocks) > 0 {
		p.sorted = append(p.sorted[:0], q.table...)
		slices.Sort(p.sorted)
		for k := 1; k < len(p.sorted); k++ {
			if p.sorted[k] == p.sorted[k-1] {
				return fmt.Errorf("row %d: sequence %d: block %d is already in the table of sequence %d", i, r.ID, p.sorted[k], r.ID)
			}
		}
	}
	end := uint64(r.Pos) + uint64(len(r.Tokens))
	if need := (end + uint64(p.blockSize) - 1) / uint64(p.blockSize); need > uint64(len(q.table)) {
		return fmt.Errorf("row %d: sequence %d: a table of %d blocks of %d tokens does not cover its %d tokens", i, r.ID, len(q.table), p.blockSize, end)
	}
	return nil
}

// feed takes row i of sequence q once every row is written: without a
// pool it appends the tokens; with one it reads the history back through
// the table. It returns the sequence to sample, or nil.
func (p *paged) feed(q *pagedSeq, r *row2, i int) (*rank.Seq, error) {
	end := uint64(r.Pos) + uint64(len(r.Tokens))
	var hist []int32
	if p.blocks == 0 {
		q.tokens = append(q.tokens, r.Tokens...)
		hist = q.tokens
	} else {
		var err error
		if hist, err = p.read(q, end, r, i); err != nil {
			return nil, err
		}
		q.hist = hist
	}
	if !r.Sample {
		return nil, nil
	}
	// The decoder checked that a sampled row holds its whole prompt.
	q.view = rank.Seq{ID: r.ID, Prompt: hist[:r.Prompt], Output: hist[r.Prompt:end]}
	return &q.view, nil
}

// write stores row i's tokens [Pos, Pos+T) at their slots (with a pool).
// Every block it writes must be in q's table only.
func (p *paged) write(q *pagedSeq, r *row2, i int) error {
	if p.blocks == 0 {
		return nil
	}
	bs := uint64(p.blockSize)
	pos, toks := uint64(r.Pos), r.Tokens
	for len(toks) > 0 {
		b, off := q.table[pos/bs], pos%bs
		if p.refs[b] > 1 {
			return fmt.Errorf("row %d: sequence %d writes block %d, which is also in the table of sequence %d", i, r.ID, b, p.holder(b, r.ID))
		}
		kv, ok := p.kv[b]
		if !ok {
			kv = make([]int32, 0, min(bs, 1<<12))
		}
		if off > uint64(len(kv)) {
			// Cannot happen: a sequence writes its blocks from their first slot on.
			return fmt.Errorf("row %d: sequence %d writes block %d from slot %d, its slots from %d on were never written", i, r.ID, b, off, len(kv))
		}
		n, m := min(uint64(len(toks)), bs-off), uint64(len(kv))
		// The slots after these keep what they held.
		p.kv[b] = append(kv[:off], toks[:n]...)[:max(m, off+n)]
		pos, toks = pos+n, toks[n:]
	}
	return nil
}

// read returns q's first end tokens, read back through its table into
// q.hist (reused). A slot never written is an error naming its block.
func (p *paged) read(q *pagedSeq, end uint64, r *row2, i int) ([]int32, error) {
	bs := uint64(p.blockSize)
	hist := q.hist[:0]
	for j := uint64(0); j*bs < end; j++ {
		b := q.table[j]
		n, kv := min(bs, end-j*bs), p.kv[b]
		if uint64(len(kv)) < n {
			return hist, fmt.Errorf("row %d: sequence %d reads block %d, whose slot %d (its token %d) was never written", i, r.ID, b, len(kv), j*bs+uint64(len(kv)))
		}
		hist = append(hist, kv[:n]...)
	}
	return hist, nil
}

// holder is the lowest id but self whose table has block b.
func (p *paged) holder(b uint32, self uint64) uint64 {
	var best uint64
	found := false
	for id, q := range p.seqs {
		if id != self && (!found || id < best) && slices.Contains(q.table, b) {
			best, found = id, true
		}
	}
	return best
}
