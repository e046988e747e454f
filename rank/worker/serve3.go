package worker

import (
	"fmt"

	"github.com/tpcoord/tpcoord/rank"
)

// paged is what a version 3 worker holds: each sequence's tokens (the
// synthetic model's logits depend on them) and block table, and which
// sequence's table has each block. A real runtime keeps the tables to
// compute slots (table[i/bs]·bs + i%bs) and its KV pool in place of the
// tokens; the checks are the same.
type paged struct {
	blockSize, blocks uint32
	seqs              map[uint64]*pagedSeq
	owner             map[uint32]uint64 // block → the sequence it belongs to
}

type pagedSeq struct {
	tokens []int32
	table  []uint32
	view   rank.Seq // the tokens as the model takes them, when sampled
}

func newPaged(blockSize, blocks uint32) paged {
	return paged{blockSize: blockSize, blocks: blocks, seqs: map[uint64]*pagedSeq{}, owner: map[uint32]uint64{}}
}

// apply3 decodes a version 3 FORWARD and applies it: finished ids free
// their sequences and blocks first (a freed block may join another table
// in the same FORWARD), then each row. The rows it returns are the batch's
// sampled rows, nil for the others. After it the worker holds exactly the
// batch's rows.
func (s *server) apply3(body []byte) (uint64, []*rank.Seq, error) {
	f := &s.fwd2
	if err := decodeForwardDelta(body, s.hello.MaxBatch, ProtocolV3, f); err != nil {
		return 0, nil, err
	}
	for _, id := range f.Finished {
		s.paged.free(id) // an id this worker does not hold is ignored
	}
	s.batch = s.batch[:0]
	for i := range f.Rows {
		seq, err := s.paged.apply(&f.Rows[i], i)
		if err != nil {
			return 0, nil, fmt.Errorf("step %d: %w", f.Step, err)
		}
		s.batch = append(s.batch, seq)
	}
	if len(s.paged.seqs) > len(f.Rows) {
		return 0, nil, fmt.Errorf("step %d: this worker holds %d sequences, the batch has %d rows: the FORWARD does not finish the sequences that left", f.Step, len(s.paged.seqs), len(f.Rows))
	}
	return f.Step, s.batch, nil
}

func (p *paged) free(id uint64) {
	q, ok := p.seqs[id]
	if !ok {
		return
	}
	for _, b := range q.table {
		delete(p.owner, b)
	}
	delete(p.seqs, id)
}

// apply checks row i against what is held, then appends its tokens and
// blocks. It returns the sequence to sample, or nil.
func (p *paged) apply(r *row2, i int) (*rank.Seq, error) {
	q, known := p.seqs[r.ID]
	switch {
	case r.New && known:
		return nil, fmt.Errorf("row %d: sequence %d is flagged NEW but this worker already holds it", i, r.ID)
	case r.New:
		q = &pagedSeq{}
		p.seqs[r.ID] = q
	case !known:
		return nil, fmt.Errorf("row %d: sequence %d is not flagged NEW but this worker does not hold it", i, r.ID)
	case uint64(r.Pos) != uint64(len(q.tokens)):
		return nil, fmt.Errorf("row %d: sequence %d continues at position %d, this worker holds %d of its tokens", i, r.ID, r.Pos, len(q.tokens))
	}
	if err := p.grow(q, r, i); err != nil {
		return nil, err
	}
	q.tokens = append(q.tokens, r.Tokens...)
	if !r.Sample {
		return nil, nil
	}
	// The decoder checked that a sampled row holds its whole prompt.
	q.view = rank.Seq{ID: r.ID, Prompt: q.tokens[:r.Prompt], Output: q.tokens[r.Prompt:]}
	return &q.view, nil
}

// grow appends row i's blocks to q's table: each must be in the pool and
// in no live table, and the table must then cover the row's last token.
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
		if o, ok := p.owner[b]; ok {
			return fmt.Errorf("row %d: sequence %d: block %d is already in the table of sequence %d", i, r.ID, b, o)
		}
		p.owner[b] = r.ID
		q.table = append(q.table, b)
	}
	end := uint64(r.Pos) + uint64(len(r.Tokens))
	if need := (end + uint64(p.blockSize) - 1) / uint64(p.blockSize); need > uint64(len(q.table)) {
		return fmt.Errorf("row %d: sequence %d: a table of %d blocks of %d tokens does not cover its %d tokens", i, r.ID, len(q.table), p.blockSize, end)
	}
	return nil
}
