package rank

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tpcoord/tpcoord/broadcast/api"
)

// scriptGrammars is a fake Grammars for the unit tests of Sampling's
// structured part: the language of a request is one token sequence,
// written as its regex field ("3 9 4"); a choice of ["bad"] fails to start.
type scriptGrammars struct {
	starts atomic.Int64
	// leakEOS: every mask allows token 5, the tests' EOS, as a grammar
	// over a tokenizer that does not mark EOS special would.
	leakEOS bool
}

type scriptConstraint struct {
	want    []int32
	at      int
	allow   []uint64
	leakEOS bool
}

func (g *scriptGrammars) Check(so *api.StructuredOutputs) error {
	_, err := g.Start(so)
	return err
}

func (g *scriptGrammars) Start(so *api.StructuredOutputs) (Constraint, error) {
	if len(so.Choice) > 0 {
		return nil, errors.New("this grammar does not start")
	}
	g.starts.Add(1)
	c := &scriptConstraint{allow: make([]uint64, 8), leakEOS: g.leakEOS}
	for _, f := range strings.Fields(so.Regex) {
		var tok int32
		if _, err := fmt.Sscan(f, &tok); err != nil {
			return nil, err
		}
		c.want = append(c.want, tok)
	}
	return c, nil
}

func (c *scriptConstraint) Allowed() []uint64 {
	clear(c.allow)
	if c.at < len(c.want) {
		t := c.want[c.at]
		c.allow[t/64] |= 1 << (t % 64)
	}
	if c.leakEOS {
		c.allow[0] |= 1 << 5
	}
	return c.allow
}

func (c *scriptConstraint) CanEnd() bool { return c.at == len(c.want) }

func (c *scriptConstraint) Accept(id int32) error {
	if c.at >= len(c.want) || c.want[c.at] != id {
		return fmt.Errorf("token %d not allowed", id)
	}
	c.at++
	return nil
}

// runScripted samples rows until each ends (EOS) or maxSteps pass, with or
// without Prefetch, and returns the outputs. Row 2 has no constraint.
func runScripted(t *testing.T, p *Sampling, prefetch bool, reqs []*Request, maxSteps int) [][]int32 {
	t.Helper()
	const vocab = 512
	ex, err := NewSynthetic(SyntheticConfig{Vocab: vocab, EOS: -1, Logits: true})
	if err != nil {
		t.Fatal(err)
	}
	var rows []*Seq
	for i := range reqs {
		rows = append(rows, &Seq{ID: uint64(i + 1), Prompt: []int32{int32(i), 7}, Fed: 2})
	}
	ended := make([]bool, len(rows))
	for range maxSteps {
		var live []*Seq
		var lreqs []*Request
		for i, r := range rows {
			if !ended[i] {
				live, lreqs = append(live, r), append(lreqs, reqs[i])
			}
		}
		if len(live) == 0 {
			break
		}
		if prefetch {
			p.Prefetch(live, lreqs)
		}
		logits, err := ex.Forward(t.Context(), Batch{Rows: live})
		if err != nil {
			t.Fatal(err)
		}
		tokens, errs := make([]int32, len(live)), make([]error, len(live))
		p.Pick(live, lreqs, logits, vocab, tokens, errs)
		for i, r := range live {
			if errs[i] != nil {
				t.Fatalf("seq %d: %v", r.ID, errs[i])
			}
			if tokens[i] == 5 { // EOS
				ended[r.ID-1] = true
				continue
			}
			r.Output = append(r.Output, tokens[i])
			r.Fed++
		}
	}
	out := make([][]int32, len(rows))
	for i, r := range rows {
		out[i] = r.Output
	}
	return out
}

// TestSamplingFollowsConstraints: constrained rows sample exactly their
// script then EOS (only allowed where the script may end, even when the
// grammar's mask allows it), with and without Prefetch, beside an unconstrained row that the masks leave as it
// would be alone.
func TestSamplingFollowsConstraints(t *testing.T) {
	seed := uint64(3)
	mk := func(script string) *Request {
		p := api.DefaultParams()
		p.Seed = &seed
		if script != "" {
			p.StructuredOutputs = &api.StructuredOutputs{Regex: script}
		}
		return &Request{Params: p, MaxTokens: 20}
	}
	reqs := []*Request{mk("3 9 4"), mk("100 200 300 400"), mk("")}
	for _, prefetch := range []bool{true, false} {
		g := &scriptGrammars{leakEOS: prefetch}
		p := NewSamplingWith(SamplingConfig{Vocab: 512, EOS: 5, Base: 1, Grammars: g})
		out := runScripted(t, p, prefetch, reqs, 8)
		if !slices.Equal(out[0], []int32{3, 9, 4}) || !slices.Equal(out[1], []int32{100, 200, 300, 400}) {
			t.Fatalf("prefetch=%v: outputs %v", prefetch, out)
		}
		alone := runScripted(t, NewSamplingWith(SamplingConfig{Vocab: 512, EOS: 5, Base: 1}), prefetch, []*Request{mk(""), mk(""), mk("")}, 8)
		if !slices.Equal(out[2], alone[2]) {
			t.Fatalf("prefetch=%v: the unconstrained row gave %v beside constrained rows, %v alone", prefetch, out[2], alone[2])
		}
		if g.starts.Load() != 2 {
			t.Errorf("prefetch=%v: %d constraints started, want 2 (one per sequence)", prefetch, g.starts.Load())
		}
	}
}

// TestSamplingReplaysAConstraint: a sequence that leaves the batch
// (preempted) and returns has its constraint rebuilt from its tokens.
func TestSamplingReplaysAConstraint(t *testing.T) {
	g := &scriptGrammars{}
	p := NewSamplingWith(SamplingConfig{Vocab: 512, EOS: 5, Base: 1, Grammars: g})
	params := api.DefaultParams()
	params.StructuredOutputs = &api.StructuredOutputs{Regex: "7 8 9"}
	req := &Request{Params: params}
	ex, err := NewSynthetic(SyntheticConfig{Vocab: 512, EOS: -1, Logits: true})
	if err != nil {
		t.Fatal(err)
	}
	seq := &Seq{ID: 1, Prompt: []int32{1}, Output: []int32{7}, Fed: 2} // as if 7 was sampled before a preemption
	other := &Seq{ID: 2, Prompt: []int32{1}, Fed: 1}
	for step, rows := range [][]*Seq{{seq}, {other}, {seq}} {
		reqs := make([]*Request, len(rows))
		for i, r := range rows {
			if r == seq {
				reqs[i] = req
			}
		}
		p.Prefetch(rows, reqs)
		logits, err := ex.Forward(t.Context(), Batch{Rows: rows})
		if err != nil {
			t.Fatal(err)
		}
		tokens, errs := make([]int32, len(rows)), make([]error, len(rows))
		p.Pick(rows, reqs, logits, 512, tokens, errs)
		if rows[0] == seq {
			if errs[0] != nil || tokens[0] != []int32{8, 0, 9}[step] {
				t.Fatalf("step %d: token %d, %v", step, tokens[0], errs[0])
			}
			seq.Output, seq.Fed = append(seq.Output, tokens[0]), seq.Fed+1
		}
	}
	if g.starts.Load() != 2 {
		t.Errorf("%d starts, want 2: one at first, one replay after the sequence left the batch", g.starts.Load())
	}
}

// TestSamplingConstraintFailures: a constraint that cannot start, or an
// output that left it, fails that row alone.
func TestSamplingConstraintFailures(t *testing.T) {
	p := NewSamplingWith(SamplingConfig{Vocab: 512, EOS: 5, Base: 1, Grammars: &scriptGrammars{}})
	bad, off, fine := api.DefaultParams(), api.DefaultParams(), api.DefaultParams()
	bad.StructuredOutputs = &api.StructuredOutputs{Choice: []string{"bad"}}
	off.StructuredOutputs = &api.StructuredOutputs{Regex: "1 2"}
	rows := []*Seq{{ID: 1, Prompt: []int32{1}, Fed: 1}, {ID: 2, Prompt: []int32{1}, Output: []int32{2}, Fed: 2}, {ID: 3, Prompt: []int32{1}, Fed: 1}}
	reqs := []*Request{{Params: bad}, {Params: off}, {Params: fine}}
	ex, err := NewSynthetic(SyntheticConfig{Vocab: 512, EOS: -1, Logits: true})
	if err != nil {
		t.Fatal(err)
	}
	logits, err := ex.Forward(t.Context(), Batch{Rows: rows})
	if err != nil {
		t.Fatal(err)
	}
	tokens, errs := make([]int32, 3), make([]error, 3)
	p.Pick(rows, reqs, logits, 512, tokens, errs)
	if errs[0] == nil || errs[1] == nil || errs[2] != nil || tokens[2] < 0 {
		t.Fatalf("tokens %v, errors %v", tokens, errs)
	}
}
