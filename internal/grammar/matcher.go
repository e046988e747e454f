package grammar

import (
	"encoding/binary"
	"fmt"
	"slices"
)

// A matcher's state is a set of parse stacks. A stack is a node: an NFA
// state with byte edges (where the next byte is read) and its parent, the
// stack of states to return to; nodes are interned, so a stack is one
// int32 and stacks share their tails. A set of stacks is interned too, so
// a matcher's whole state is one int32, and the transitions between sets
// are memoized per byte.

// deadSet is the empty set: nothing more can be matched.
const deadSet = 0

// stackNode is an interned stack: state on top of parent (-1: none).
type stackNode struct {
	state, parent, depth int32
}

// stateSet is an interned set of stacks, closed under epsilon moves,
// calls and returns.
type stateSet struct {
	stacks []int32 // node ids, sorted
	canEnd bool    // the start rule may end here
}

// closureFactor bounds the moves of one closure (pairs of a state and a
// stack, with or without byte edges) to this many times MaxStacks: without
// it, nested optional rules could make a closure exponential in the
// grammar's depth while finding few stacks.
const closureFactor = 16

// memo per set and byte: 0 unknown, -1 an error (a limit), else set id + 1.
type memo = [256]int32

// tables holds the interned nodes and sets of one generation, with the
// memoized transitions and the cached masks of its sets.
type tables struct {
	a       *Automaton
	nodes   []stackNode
	nodeIdx map[[2]int32]int32
	sets    []stateSet
	next    []*memo
	setIdx  map[string]int32
	bytes   int
	masks   maskCache
	start   int32 // the start set, once known (-1 before)

	// scratch of closure
	seen  map[[2]int32]struct{}
	work  [][2]int32
	found []int32
	key   []byte
}

func newTables(a *Automaton) *tables {
	t := &tables{a: a, nodeIdx: map[[2]int32]int32{}, setIdx: map[string]int32{},
		seen: map[[2]int32]struct{}{}, start: -1}
	t.intern(nil, false) // deadSet
	return t
}

// Approximate sizes for MaxTableBytes: a node with its index entry, a set
// with its index entry (plus 8 bytes a stack), a transition table.
const (
	nodeBytes = 64
	setBytes  = 96
	memoBytes = 1024 + 8
)

// startSet is the set at the start of the output.
func (t *tables) startSet() (int32, error) {
	if t.start >= 0 {
		return t.start, nil
	}
	t.beginClosure()
	if err := t.closure(t.a.starts[0], -1); err != nil {
		return deadSet, err
	}
	t.start = t.endClosure()
	return t.start, nil
}

// node interns the stack state-on-parent.
func (t *tables) node(state, parent int32) (int32, error) {
	k := [2]int32{state, parent}
	if id, ok := t.nodeIdx[k]; ok {
		return id, nil
	}
	depth := int32(1)
	if parent >= 0 {
		depth = t.nodes[parent].depth + 1
	}
	if int(depth) > t.a.lim.MaxDepth {
		return 0, fmt.Errorf("rule calls nested deeper than %d (Limits.MaxDepth)", t.a.lim.MaxDepth)
	}
	id := int32(len(t.nodes))
	t.nodes = append(t.nodes, stackNode{state, parent, depth})
	t.nodeIdx[k] = id
	t.bytes += nodeBytes
	return id, nil
}

// intern returns the id of the set of stacks (sorted, distinct).
func (t *tables) intern(stacks []int32, canEnd bool) int32 {
	t.key = t.key[:0]
	for _, s := range stacks {
		t.key = binary.LittleEndian.AppendUint32(t.key, uint32(s))
	}
	if canEnd {
		t.key = append(t.key, 1)
	}
	if id, ok := t.setIdx[string(t.key)]; ok {
		return id
	}
	id := int32(len(t.sets))
	t.sets = append(t.sets, stateSet{stacks: slices.Clone(stacks), canEnd: canEnd})
	t.next = append(t.next, nil)
	t.setIdx[string(t.key)] = id
	t.bytes += setBytes + 8*len(stacks)
	return id
}

func (t *tables) beginClosure() {
	clear(t.seen)
	t.found = t.found[:0]
	t.work = t.work[:0]
}

// closure adds to the set being built every stack reachable from state on
// parent without consuming a byte: through epsilon moves, calls (which
// push their return state unless it is a tail) and rule ends (which pop).
// Reaching the end of the start rule with nothing to return to marks the
// set as able to end (recorded as node -1 in found).
func (t *tables) closure(state, parent int32) error {
	t.work = append(t.work, [2]int32{state, parent})
	for len(t.work) > 0 {
		k := t.work[len(t.work)-1]
		t.work = t.work[:len(t.work)-1]
		if _, ok := t.seen[k]; ok {
			continue
		}
		t.seen[k] = struct{}{}
		if len(t.seen) > closureFactor*t.a.lim.MaxStacks {
			return fmt.Errorf("more than %d moves without consuming a byte (%d × Limits.MaxStacks): the grammar is too ambiguous here", closureFactor*t.a.lim.MaxStacks, closureFactor)
		}
		s, p := k[0], k[1]
		st := &t.a.states[s]
		if len(st.edges) > 0 {
			id, err := t.node(s, p)
			if err != nil {
				return err
			}
			if t.found = append(t.found, id); len(t.found) > t.a.lim.MaxStacks {
				return fmt.Errorf("more than %d parse stacks at once (Limits.MaxStacks): the grammar is too ambiguous here", t.a.lim.MaxStacks)
			}
		}
		for _, e := range st.eps {
			t.work = append(t.work, [2]int32{e, p})
		}
		for _, c := range st.calls {
			np := p
			if !t.a.states[c.ret].tail {
				var err error
				if np, err = t.node(c.ret, p); err != nil {
					return err
				}
			}
			t.work = append(t.work, [2]int32{t.a.starts[c.rule], np})
		}
		if st.final {
			if p < 0 {
				t.found = append(t.found, -1)
			} else {
				t.work = append(t.work, [2]int32{t.nodes[p].state, t.nodes[p].parent})
			}
		}
	}
	return nil
}

// endClosure interns the set built since beginClosure.
func (t *tables) endClosure() int32 {
	slices.Sort(t.found)
	canEnd := false
	if len(t.found) > 0 && t.found[0] == -1 {
		canEnd = true
		t.found = t.found[1:]
		for len(t.found) > 0 && t.found[0] == -1 {
			t.found = t.found[1:]
		}
	}
	return t.intern(t.found, canEnd)
}

// step returns the set after byte b from set s, or -1 if a limit was hit
// (stepErr tells which).
func (t *tables) step(s int32, b byte) int32 {
	if m := t.next[s]; m != nil {
		if v := m[b]; v > 0 {
			return v - 1
		} else if v < 0 {
			return -1
		}
	}
	id, err := t.stepSlow(s, b)
	if err != nil {
		return -1
	}
	return id
}

// stepSlow computes (and memoizes) the set after byte b from set s.
func (t *tables) stepSlow(s int32, b byte) (int32, error) {
	m := t.next[s]
	if m == nil {
		m = new(memo)
		t.next[s] = m
		t.bytes += memoBytes
	}
	t.beginClosure()
	for _, id := range t.sets[s].stacks {
		n := t.nodes[id]
		for _, e := range t.a.states[n.state].edges {
			if e.lo <= b && b <= e.hi {
				if err := t.closure(e.to, n.parent); err != nil {
					m[b] = -1
					return -1, err
				}
			}
		}
	}
	id := t.endClosure()
	m[b] = id + 1
	return id, nil
}

// moveFrom interns in t the set s of an older generation old.
func (t *tables) moveFrom(old *tables, s int32) int32 {
	set := old.sets[s]
	stacks := make([]int32, 0, len(set.stacks))
	var chain []int32
	for _, id := range set.stacks {
		chain = chain[:0]
		for n := id; n >= 0; n = old.nodes[n].parent {
			chain = append(chain, old.nodes[n].state)
		}
		p := int32(-1)
		for i := len(chain) - 1; i >= 0; i-- {
			// Depth was within the limit in old, so this cannot fail.
			p, _ = t.node(chain[i], p)
		}
		stacks = append(stacks, p)
	}
	slices.Sort(stacks)
	return t.intern(stacks, set.canEnd)
}

// Matcher is one output's position in the grammar. Not safe for
// concurrent use; many matchers may share one Tokens.
type Matcher struct {
	t   *Tokens
	tab *tables
	set int32
}

// Start returns a matcher at the start of the output.
func (t *Tokens) Start() *Matcher {
	t.mu.Lock()
	defer t.mu.Unlock()
	tab := t.current()
	s, _ := tab.startSet() // Compile checked the start is within the limits
	return &Matcher{t: t, tab: tab, set: s}
}

// sync moves m to the current tables; t.mu is held.
func (m *Matcher) sync() *tables {
	tab := m.t.current()
	if m.tab != tab {
		m.set = tab.moveFrom(m.tab, m.set)
		m.tab = tab
	}
	return tab
}

// CanEnd reports whether the bytes so far are a whole sentence of the
// grammar.
func (m *Matcher) CanEnd() bool {
	m.t.mu.Lock()
	defer m.t.mu.Unlock()
	return m.sync().sets[m.set].canEnd
}

// Done reports whether the output is complete: CanEnd, and no byte may
// follow (only the end of the output remains).
func (m *Matcher) Done() bool {
	m.t.mu.Lock()
	defer m.t.mu.Unlock()
	s := m.sync().sets[m.set]
	return s.canEnd && len(s.stacks) == 0
}

// Dead reports whether nothing can follow and the output cannot end: the
// grammar matches nothing from here (only possible at the start, for a
// grammar whose language is empty).
func (m *Matcher) Dead() bool {
	m.t.mu.Lock()
	defer m.t.mu.Unlock()
	m.sync()
	return m.set == deadSet
}

// Accept consumes token id's bytes. It returns an error naming the token
// if the token is not allowed here (special, empty, out of range, or its
// bytes do not continue the grammar), and then the matcher is unchanged.
func (m *Matcher) Accept(id int32) error {
	v := m.t.v
	if id < 0 || int(id) >= v.Size() {
		return fmt.Errorf("grammar: token %d is out of range [0, %d)", id, v.Size())
	}
	if !v.eligible(id) {
		return fmt.Errorf("grammar: token %d is special or empty, never allowed by a grammar", id)
	}
	if err := m.accept(v.pieces[id]); err != nil {
		return fmt.Errorf("grammar: token %d %q is not allowed here: %w", id, v.pieces[id], err)
	}
	return nil
}

// AcceptBytes consumes raw bytes. On an error (the bytes do not continue
// the grammar, or a limit is hit) the matcher is unchanged.
func (m *Matcher) AcceptBytes(b []byte) error {
	if err := m.accept(b); err != nil {
		return fmt.Errorf("grammar: %w", err)
	}
	return nil
}

func (m *Matcher) accept(b []byte) error {
	m.t.mu.Lock()
	defer m.t.mu.Unlock()
	tab := m.sync()
	s := m.set
	for i, c := range b {
		next, err := tab.stepErr(s, c)
		if err != nil {
			return fmt.Errorf("at byte %d (%q): %w", i, c, err)
		}
		if next == deadSet {
			return fmt.Errorf("byte %d (%q) of %q does not continue the grammar", i, c, b)
		}
		s = next
	}
	m.set = s
	m.t.afterStep()
	return nil
}

// stepErr is step with the error of a limit.
func (t *tables) stepErr(s int32, b byte) (int32, error) {
	if next := t.step(s, b); next >= 0 {
		return next, nil
	}
	if m := t.next[s]; m != nil {
		m[b] = 0 // compute again for the error
	}
	return t.stepSlow(s, b)
}

// Clone returns a copy of the matcher (cheap: the state is one id).
func (m *Matcher) Clone() *Matcher {
	c := *m
	return &c
}
