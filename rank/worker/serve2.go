package worker

import (
	"fmt"
	"slices"

	"github.com/tpcoord/tpcoord/rank"
)

// seqs are the sequences a version 2 worker holds, by id, with every token
// the agent sent for them: the synthetic model's logits depend on the
// prompt, the output length and the last token, so holding them keeps the
// logits bit-identical to the synthetic executor's.
type seqs map[uint64]*rank.Seq

// apply2 decodes a version 2 FORWARD and applies it to the held sequences:
// finished ids first, then each row. After it the worker holds exactly the
// batch's rows, which bounds what an agent can make it keep.
func (s *server) apply2(body []byte) (uint64, []*rank.Seq, error) {
	f := &s.fwd2
	if err := decodeForward2(body, s.hello.MaxBatch, f); err != nil {
		return 0, nil, err
	}
	if s.held == nil {
		s.held = seqs{}
	}
	for _, id := range f.Finished {
		delete(s.held, id) // an id this worker does not hold is ignored
	}
	s.batch = s.batch[:0]
	for i := range f.Rows {
		seq, err := s.held.apply(&f.Rows[i], i)
		if err != nil {
			return 0, nil, fmt.Errorf("step %d: %w", f.Step, err)
		}
		s.batch = append(s.batch, seq)
	}
	if len(s.held) > len(f.Rows) {
		return 0, nil, fmt.Errorf("step %d: this worker holds %d sequences, the batch has %d rows: the FORWARD does not finish the sequences that left", f.Step, len(s.held), len(f.Rows))
	}
	return f.Step, s.batch, nil
}

// apply adds a NEW row's sequence or appends a known row's tokens to the
// sequence held, checking the row against what is held.
func (h seqs) apply(r *row2, i int) (*rank.Seq, error) {
	seq, known := h[r.ID]
	switch {
	case r.New && known:
		return nil, fmt.Errorf("row %d: sequence %d is flagged NEW but this worker already holds it", i, r.ID)
	case r.New:
		seq = &rank.Seq{ID: r.ID, Prompt: slices.Clone(r.Tokens[:r.Prompt]), Output: slices.Clone(r.Tokens[r.Prompt:])}
		h[r.ID] = seq
	case !known:
		return nil, fmt.Errorf("row %d: sequence %d is not flagged NEW but this worker does not hold it", i, r.ID)
	case uint64(r.Pos) != uint64(len(seq.Prompt)+len(seq.Output)):
		return nil, fmt.Errorf("row %d: sequence %d continues at position %d, this worker holds %d of its tokens", i, r.ID, r.Pos, len(seq.Prompt)+len(seq.Output))
	default:
		seq.Output = append(seq.Output, r.Tokens...)
	}
	return seq, nil
}
