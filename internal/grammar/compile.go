package grammar

import (
	"fmt"
	"unicode/utf8"
)

// Automaton is a grammar lowered to a byte-level pushdown automaton: each
// rule is a Thompson NFA whose edges are byte ranges, epsilon moves, or
// calls of another rule (which push the state to return to). It is
// immutable after Compile and may be shared; NewTokens binds it to a
// vocabulary for matching.
type Automaton struct {
	states []nfaState
	starts []int32 // per rule: its first state
	names  []string
	lim    Limits
}

// edge consumes one byte in [lo, hi] and goes to state to.
type edge struct {
	lo, hi byte
	to     int32
}

// call enters rule's start state; when the rule ends, matching goes on at
// ret.
type call struct{ rule, ret int32 }

type nfaState struct {
	edges []edge
	eps   []int32
	calls []call
	// final marks the end of the state's rule: matching returns to the
	// caller (or the whole output may end, for the start rule).
	final bool
	// tail: the rule can only end from here without consuming anything,
	// so a call returning here needs no frame on the stack.
	tail bool
}

// NumStates is the number of automaton states (what Limits.MaxStates
// bounds).
func (a *Automaton) NumStates() int { return len(a.states) }

// Compile lowers g to a byte-level pushdown automaton. Errors name the
// rule: left recursion (a rule that can reach itself without consuming a
// byte) is refused, as is a grammar over lim.MaxStates states or one whose
// start already exceeds lim.MaxStacks or lim.MaxDepth. An expression that
// matches nothing anywhere is fine: the parts of the automaton that cannot
// lead to the end of the output are removed, so a matcher never enters a
// state from which the output cannot be completed.
func Compile(g *Grammar, lim Limits) (*Automaton, error) {
	lim, err := lim.resolve()
	if err != nil {
		return nil, err
	}
	if g == nil || len(g.Rules) == 0 {
		return nil, fmt.Errorf("grammar: no rules")
	}
	a := &Automaton{lim: lim, starts: make([]int32, len(g.Rules)), names: make([]string, len(g.Rules))}
	lw := &lowerer{a: a}
	for i, r := range g.Rules {
		a.names[i] = r.Name
		if r.Body == nil {
			return nil, fmt.Errorf("grammar: rule %q has no body", r.Name)
		}
		if err := checkRefs(r.Body, len(g.Rules)); err != nil {
			return nil, fmt.Errorf("grammar: rule %q: %w", r.Name, err)
		}
		if err := lw.rule(i, r.Body); err != nil {
			return nil, err
		}
	}
	an := newAnalysis(a)
	if err := an.leftRecursion(); err != nil {
		return nil, err
	}
	an.trim()
	a.markTails()
	if _, err := newTables(a).startSet(); err != nil {
		return nil, fmt.Errorf("grammar: at the start: %w", err)
	}
	return a, nil
}

// lowerer builds the NFA of each rule.
type lowerer struct {
	a   *Automaton
	cur int
	err error
	// share maps (state, lo, hi) to the state after that byte within one
	// character class, so UTF-8 sequences with a common prefix share it.
	share map[edgeKey]int32
}

type edgeKey struct {
	from   int32
	lo, hi byte
}

func (l *lowerer) rule(i int, body *Expr) error {
	l.cur = i
	start := l.newState()
	l.a.starts[i] = start
	end := l.lower(body, start)
	if l.err != nil {
		return l.err
	}
	st := &l.a.states[end]
	if len(st.edges) > 0 || len(st.eps) > 0 || len(st.calls) > 0 {
		fin := l.newState()
		l.eps(end, fin)
		end = fin
	}
	if l.err != nil {
		return l.err
	}
	l.a.states[end].final = true
	return nil
}

// newState adds a state; past MaxStates it records the error and returns
// state 0 so that lowering can unwind.
func (l *lowerer) newState() int32 {
	if l.err != nil {
		return 0
	}
	if len(l.a.states) >= l.a.lim.MaxStates {
		l.err = fmt.Errorf("grammar: rule %q: more than %d automaton states (Limits.MaxStates)", l.a.names[l.cur], l.a.lim.MaxStates)
		return 0
	}
	l.a.states = append(l.a.states, nfaState{})
	return int32(len(l.a.states) - 1)
}

func (l *lowerer) eps(from, to int32) {
	if l.err == nil && from != to {
		l.a.states[from].eps = append(l.a.states[from].eps, to)
	}
}

func (l *lowerer) byteEdge(from int32, lo, hi byte, to int32) {
	if l.err == nil {
		l.a.states[from].edges = append(l.a.states[from].edges, edge{lo, hi, to})
	}
}

// lower adds e's NFA starting at state in and returns its end state. It
// adds edges out of in but never into it.
func (l *lowerer) lower(e *Expr, in int32) int32 {
	if l.err != nil {
		return 0
	}
	switch e.Op {
	case OpEmpty:
		return in
	case OpBytes:
		return l.lowerBytes(e, in)
	case OpRunes:
		return l.lowerRunes(e, in)
	case OpLit:
		cur := in
		for i := 0; i < len(e.Text); i++ {
			next := l.newState()
			l.byteEdge(cur, e.Text[i], e.Text[i], next)
			cur = next
		}
		return cur
	case OpSeq:
		cur := in
		for _, s := range e.Subs {
			cur = l.lower(s, cur)
		}
		return cur
	case OpAlt:
		return l.lowerAlt(e, in)
	case OpRepeat:
		return l.lowerRepeat(e, in)
	case OpRef:
		out := l.newState()
		if l.err == nil {
			l.a.states[in].calls = append(l.a.states[in].calls, call{int32(e.Rule), out})
		}
		return out
	}
	l.err = fmt.Errorf("grammar: rule %q: unknown expression op %d", l.a.names[l.cur], e.Op)
	return 0
}

// lowerAlt lowers the literal alternatives into one trie (so that an
// enum of thousands of strings costs a stack per distinct next byte, not
// one per string) and each other alternative on a branch of its own.
func (l *lowerer) lowerAlt(e *Expr, in int32) int32 {
	out := l.newState()
	trie := int32(-1)
	next := map[[2]int32]int32{} // (trie state, byte) → trie state
	ends := map[int32]bool{}     // trie states already joined to out
	for _, s := range e.Subs {
		if s.Op != OpLit {
			b := l.newState()
			l.eps(in, b)
			l.eps(l.lower(s, b), out)
			continue
		}
		if trie < 0 {
			trie = l.newState()
			l.eps(in, trie)
		}
		cur := trie
		for i := 0; i < len(s.Text) && l.err == nil; i++ {
			k := [2]int32{cur, int32(s.Text[i])}
			n, ok := next[k]
			if !ok {
				n = l.newState()
				l.byteEdge(cur, s.Text[i], s.Text[i], n)
				next[k] = n
			}
			cur = n
		}
		if !ends[cur] {
			ends[cur] = true
			l.eps(cur, out)
		}
	}
	return out
}

func (l *lowerer) lowerRepeat(e *Expr, in int32) int32 {
	if len(e.Subs) != 1 || e.Min < 0 || (e.Max >= 0 && e.Max < e.Min) {
		l.err = fmt.Errorf("grammar: rule %q: bad repeat {%d,%d} of %d expressions", l.a.names[l.cur], e.Min, e.Max, len(e.Subs))
		return 0
	}
	// A sub that adds no state matches only "", and so does the repeat;
	// expanding it would take time that MaxStates does not bound.
	if addsNoState(e.Subs[0]) {
		return in
	}
	cur := in
	for i := 0; i < e.Min && l.err == nil; i++ {
		cur = l.lower(e.Subs[0], cur)
	}
	if e.Max < 0 {
		loop := l.newState()
		l.eps(cur, loop)
		l.eps(l.lower(e.Subs[0], loop), loop)
		out := l.newState()
		l.eps(loop, out)
		return out
	}
	if e.Max == e.Min {
		return cur
	}
	out := l.newState()
	for i := e.Min; i < e.Max && l.err == nil; i++ {
		l.eps(cur, out)
		cur = l.lower(e.Subs[0], cur)
	}
	l.eps(cur, out)
	return out
}

// addsNoState reports whether lowering e adds no state (it matches "").
func addsNoState(e *Expr) bool {
	switch e.Op {
	case OpEmpty:
		return true
	case OpLit:
		return e.Text == ""
	case OpSeq:
		for _, s := range e.Subs {
			if !addsNoState(s) {
				return false
			}
		}
		return true
	case OpRepeat:
		return len(e.Subs) == 1 && addsNoState(e.Subs[0])
	}
	return false
}

func (l *lowerer) lowerBytes(e *Expr, in int32) int32 {
	if len(e.Ranges)%2 != 0 {
		l.err = fmt.Errorf("grammar: rule %q: odd number of byte range bounds", l.a.names[l.cur])
		return 0
	}
	out := l.newState()
	rs := normalize(e.Ranges, 0xFF, false)
	for i := 0; i < len(rs); i += 2 {
		l.byteEdge(in, byte(rs[i]), byte(rs[i+1]), out)
	}
	return out
}

func (l *lowerer) lowerRunes(e *Expr, in int32) int32 {
	if len(e.Ranges)%2 != 0 {
		l.err = fmt.Errorf("grammar: rule %q: odd number of character range bounds", l.a.names[l.cur])
		return 0
	}
	out := l.newState()
	l.share = map[edgeKey]int32{}
	rs := normalize(e.Ranges, utf8.MaxRune, true)
	for i := 0; i < len(rs); i += 2 {
		for _, seq := range utf8Sequences(rs[i], rs[i+1]) {
			cur := in
			for k, br := range seq {
				if k == len(seq)-1 {
					l.byteEdge(cur, br[0], br[1], out)
					break
				}
				key := edgeKey{cur, br[0], br[1]}
				next, ok := l.share[key]
				if !ok {
					next = l.newState()
					l.byteEdge(cur, br[0], br[1], next)
					l.share[key] = next
				}
				cur = next
			}
		}
	}
	return out
}

// utf8Sequences splits the code points [lo, hi] (no surrogates) into
// sequences of byte ranges: the UTF-8 encodings of the range are exactly
// the byte strings matched by one of the sequences, range by range.
func utf8Sequences(lo, hi rune) [][][2]byte {
	var out [][][2]byte
	var split func(lo, hi rune)
	split = func(lo, hi rune) {
		for _, top := range []rune{0x7F, 0x7FF, 0xFFFF} {
			if lo <= top && hi > top {
				split(lo, top)
				split(top+1, hi)
				return
			}
		}
		for i := 1; i < 4; i++ {
			m := rune(1)<<(6*i) - 1
			if lo&^m != hi&^m {
				if lo&m != 0 {
					split(lo, lo|m)
					split((lo|m)+1, hi)
					return
				}
				if hi&m != m {
					split(lo, (hi&^m)-1)
					split(hi&^m, hi)
					return
				}
			}
		}
		var a, b [utf8.UTFMax]byte
		n := utf8.EncodeRune(a[:], lo)
		utf8.EncodeRune(b[:], hi)
		seq := make([][2]byte, n)
		for k := range n {
			seq[k] = [2]byte{a[k], b[k]}
		}
		out = append(out, seq)
	}
	split(lo, hi)
	return out
}

// markTails marks the states from which the rule can only end, through
// epsilon moves alone.
func (a *Automaton) markTails() {
	const (
		unknown = iota
		visiting
		yes
		no
	)
	mark := make([]uint8, len(a.states))
	var visit func(s int32) bool
	visit = func(s int32) bool {
		switch mark[s] {
		case yes:
			return true
		case no, visiting:
			return false
		}
		mark[s] = visiting
		st := &a.states[s]
		ok := st.final || (len(st.edges) == 0 && len(st.calls) == 0 && len(st.eps) > 0)
		for _, t := range st.eps {
			ok = ok && visit(t)
		}
		mark[s] = no
		if ok {
			mark[s] = yes
		}
		return ok
	}
	for s := range a.states {
		a.states[s].tail = visit(int32(s))
	}
}

// analysis holds the reverse edges of an automaton, for the fixpoints
// that find nullable rules, left recursion and dead states.
type analysis struct {
	a       *Automaton
	revByte [][]int32    // state → states with a byte edge to it
	revEps  [][]int32    // state → states with an epsilon move to it
	revRet  [][]callSite // state → calls that return to it
	callers [][]callSite // rule → its calls
	startOf []int32      // state → the rule it starts, or -1
}

type callSite struct{ from, rule, ret int32 }

func newAnalysis(a *Automaton) *analysis {
	n := len(a.states)
	an := &analysis{a: a, revByte: make([][]int32, n), revEps: make([][]int32, n),
		revRet: make([][]callSite, n), callers: make([][]callSite, len(a.starts)), startOf: make([]int32, n)}
	for s := range n {
		an.startOf[s] = -1
	}
	for r, s := range a.starts {
		an.startOf[s] = int32(r)
	}
	for s, st := range a.states {
		for _, e := range st.edges {
			an.revByte[e.to] = append(an.revByte[e.to], int32(s))
		}
		for _, t := range st.eps {
			an.revEps[t] = append(an.revEps[t], int32(s))
		}
		for _, c := range st.calls {
			cs := callSite{int32(s), c.rule, c.ret}
			an.revRet[c.ret] = append(an.revRet[c.ret], cs)
			an.callers[c.rule] = append(an.callers[c.rule], cs)
		}
	}
	return an
}

// reach returns the states from which their rule's end can be reached,
// and the rules whose end can be reached from their start, moving over
// epsilons, calls of such rules and, if bytes, byte edges too. Without
// bytes these are the nullable states and rules; with them, the live
// states and productive rules.
func (an *analysis) reach(bytes bool) (states, rules []bool) {
	states, rules = make([]bool, len(an.a.states)), make([]bool, len(an.a.starts))
	var work []int32
	mark := func(s int32) {
		if !states[s] {
			states[s] = true
			work = append(work, s)
		}
	}
	for s := range an.a.states {
		if an.a.states[s].final {
			mark(int32(s))
		}
	}
	for len(work) > 0 {
		t := work[len(work)-1]
		work = work[:len(work)-1]
		for _, p := range an.revEps[t] {
			mark(p)
		}
		if bytes {
			for _, p := range an.revByte[t] {
				mark(p)
			}
		}
		for _, cs := range an.revRet[t] {
			if rules[cs.rule] {
				mark(cs.from)
			}
		}
		if r := an.startOf[t]; r >= 0 && !rules[r] {
			rules[r] = true
			for _, cs := range an.callers[r] {
				if states[cs.ret] {
					mark(cs.from)
				}
			}
		}
	}
	return states, rules
}

// leftRecursion refuses a rule that can call itself, directly or through
// other rules, before consuming a byte.
func (an *analysis) leftRecursion() error {
	_, nullable := an.reach(false)
	a := an.a
	calls := make([][]int32, len(a.starts)) // rule → rules it may call first
	seen := make([]bool, len(a.states))
	for r, start := range a.starts {
		work := []int32{start}
		seen[start] = true
		for len(work) > 0 {
			s := work[len(work)-1]
			work = work[:len(work)-1]
			next := a.states[s].eps
			for _, c := range a.states[s].calls {
				calls[r] = append(calls[r], c.rule)
				if nullable[c.rule] {
					next = append(next[:len(next):len(next)], c.ret)
				}
			}
			for _, t := range next {
				if !seen[t] {
					seen[t] = true
					work = append(work, t)
				}
			}
		}
	}
	if cycle := findCycle(calls); cycle != nil {
		path := ""
		for i, r := range cycle {
			if i > 0 {
				path += " → "
			}
			path += a.names[r]
		}
		return fmt.Errorf("grammar: rule %q is left-recursive: it can reach itself without consuming a byte (%s)", a.names[cycle[0]], path)
	}
	return nil
}

// findCycle returns a cycle of the graph (its first node repeated at the
// end), or nil.
func findCycle(g [][]int32) []int32 {
	color := make([]uint8, len(g)) // 0 new, 1 on the path, 2 done
	var path []int32
	var visit func(v int32) []int32
	visit = func(v int32) []int32 {
		color[v] = 1
		path = append(path, v)
		for _, w := range g[v] {
			switch color[w] {
			case 1:
				for i, p := range path {
					if p == w {
						return append(append([]int32(nil), path[i:]...), w)
					}
				}
			case 0:
				if c := visit(w); c != nil {
					return c
				}
			}
		}
		path = path[:len(path)-1]
		color[v] = 2
		return nil
	}
	for v := range g {
		if color[v] == 0 {
			if c := visit(int32(v)); c != nil {
				return c
			}
		}
	}
	return nil
}

// trim removes every edge, epsilon move and call that leads to a state
// from which the rule cannot end, and calls of rules that match nothing.
func (an *analysis) trim() {
	live, productive := an.reach(true)
	for s := range an.a.states {
		st := &an.a.states[s]
		if !live[s] {
			*st = nfaState{}
			continue
		}
		edges := st.edges[:0]
		for _, e := range st.edges {
			if live[e.to] {
				edges = append(edges, e)
			}
		}
		eps := st.eps[:0]
		for _, t := range st.eps {
			if live[t] {
				eps = append(eps, t)
			}
		}
		calls := st.calls[:0]
		for _, c := range st.calls {
			if productive[c.rule] && live[c.ret] {
				calls = append(calls, c)
			}
		}
		st.edges, st.eps, st.calls = edges, eps, calls
	}
}
