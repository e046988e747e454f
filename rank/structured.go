package rank

import (
	"fmt"

	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/internal/fielderr"
)

// Constraint is one output's position in its grammar (grammar.Matcher).
type Constraint interface {
	// Allowed is the set of tokens that may come next, EOS aside (bit
	// i%64 of word i/64); read-only.
	Allowed() []uint64
	// CanEnd reports whether the output so far is a whole sentence.
	CanEnd() bool
	// Accept moves past token id, or fails if it is not allowed.
	Accept(id int32) error
}

// Grammars compiles the structured outputs of requests for rank 0.
type Grammars interface {
	// Check compiles the constraint (or finds it compiled), so that a
	// request whose constraint cannot be followed is refused when it
	// arrives. Errors name the request field. It runs on the intake
	// goroutine, not rank 0's loop.
	Check(so *api.StructuredOutputs) error
	// Start returns a constraint at the start of an output.
	Start(so *api.StructuredOutputs) (Constraint, error)
}

// checkStructured refuses a request whose structured outputs this rank 0
// cannot follow: it has no tokenizer, or the constraint does not compile.
func (d *Driver) checkStructured(so *api.StructuredOutputs) error {
	switch {
	case so == nil:
		return nil
	case d.cfg.Grammars == nil:
		return fielderr.New("structured_outputs", "this job's rank 0 has no tokenizer to follow a grammar with: start the agents with --tokenizer (launch and serve-model pass theirs)")
	}
	return d.cfg.Grammars.Check(so)
}

// structured is Sampling's part for the rows whose requests have
// structured outputs: each such sequence's constraint, advanced over the
// tokens it sampled, and the mask of its next step, made while the
// forward pass runs. Rows without a constraint cost nothing.
type structured struct {
	g     Grammars
	eos   int32
	words int // a mask's length: the vocabulary in 64-bit words
	seqs  map[uint64]*constrained
	seen  map[uint64]bool
	// masks[i] and errs[i] are batch row i's mask (nil: unconstrained)
	// and failure, for the step prepared.
	masks [][]uint64
	errs  []error
	// prepared: masks are those of the step Prefetch was told of.
	prepared bool
	done     chan struct{} // closed when the running preparation ends; nil if none
}

// constrained is one sequence's constraint.
type constrained struct {
	req  *Request // the request it was started for: sequence IDs may be reused in a new epoch
	c    Constraint
	fed  int // output tokens accepted
	mask []uint64
}

func newStructured(g Grammars, eos int32, vocab int) *structured {
	return &structured{g: g, eos: eos, words: (vocab + 63) / 64, seqs: map[uint64]*constrained{}, seen: map[uint64]bool{}}
}

func constraintOf(req *Request) *api.StructuredOutputs {
	if req == nil {
		return nil
	}
	return req.Params.StructuredOutputs
}

// prepare makes the masks of the rows about to be sampled on a goroutine
// of its own, which collect waits for. It does nothing when no row has a
// constraint.
func (s *structured) prepare(rows []*Seq, reqs []*Request) {
	s.collect()
	s.masks, s.errs = resize(s.masks, len(rows)), resize(s.errs, len(rows))
	clear(s.masks)
	clear(s.errs)
	s.prepared = true
	some := false
	for i, r := range rows {
		some = some || (!r.Prefilling() && constraintOf(reqs[i]) != nil)
	}
	if !some {
		s.forget(nil)
		return
	}
	s.done = make(chan struct{})
	go func() {
		defer close(s.done)
		s.makeMasks(rows, reqs)
	}()
}

// collect waits for the running preparation, if any.
func (s *structured) collect() {
	if s.done != nil {
		<-s.done
		s.done = nil
	}
}

// masksFor returns the masks and failures of rows: those prepared, or made
// now if Prefetch was not told of this step. The next call prepares anew.
func (s *structured) masksFor(rows []*Seq, reqs []*Request) ([][]uint64, []error) {
	if !s.prepared {
		s.prepare(rows, reqs)
	}
	s.collect()
	s.prepared = false
	return s.masks, s.errs
}

// makeMasks advances every constrained row's constraint over its new
// tokens and writes its mask: the allowed tokens, and EOS where the output
// may end. Sequences not in the batch are forgotten (one that returns, after
// a preemption, is replayed from its tokens).
func (s *structured) makeMasks(rows []*Seq, reqs []*Request) {
	clear(s.seen)
	for i, r := range rows {
		so := constraintOf(reqs[i])
		if r.Prefilling() || so == nil {
			continue
		}
		s.seen[r.ID] = true
		st, err := s.advance(r, reqs[i], so)
		if err != nil {
			s.errs[i] = err
			continue
		}
		// The words past the tokenizer's vocabulary stay zero: only the EOS
		// bit below is ever set there, and it is cleared as explicitly.
		copy(st.mask, st.c.Allowed())
		if s.eos >= 0 && int(s.eos) < s.words*64 {
			// EOS where the output may end, and only there, even if its
			// text would fit (a tokenizer that does not mark it special).
			bit := uint64(1) << (s.eos % 64)
			if st.c.CanEnd() {
				st.mask[s.eos/64] |= bit
			} else {
				st.mask[s.eos/64] &^= bit
			}
		}
		s.masks[i] = st.mask
	}
	s.forget(s.seen)
}

// advance returns sequence r's constraint, started if it has none, moved
// past the tokens it has sampled since.
func (s *structured) advance(r *Seq, req *Request, so *api.StructuredOutputs) (*constrained, error) {
	st := s.seqs[r.ID]
	if st == nil || st.req != req || st.fed > len(r.Output) {
		c, err := s.g.Start(so)
		if err != nil {
			return nil, err
		}
		st = &constrained{req: req, c: c, mask: make([]uint64, s.words)}
		s.seqs[r.ID] = st
	}
	for ; st.fed < len(r.Output); st.fed++ {
		if err := st.c.Accept(r.Output[st.fed]); err != nil {
			delete(s.seqs, r.ID)
			return nil, fmt.Errorf("structured output: output token %d: %w", st.fed, err)
		}
	}
	return st, nil
}

// forget drops the constraints of sequences not in keep (all, with nil).
func (s *structured) forget(keep map[uint64]bool) {
	for id := range s.seqs {
		if !keep[id] {
			delete(s.seqs, id)
		}
	}
}

func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}
