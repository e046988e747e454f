package grammar

import (
	"fmt"
	"strings"
)

// checkGrammar refuses a grammar that matches nothing, one with a $ref
// cycle that consumes no input (left recursion), and one past
// MaxGrammarSize.
func checkGrammar(g *Grammar) error {
	if !productive(g)[0] {
		return &SchemaError{Msg: "no JSON value satisfies the schema"}
	}
	if r := leftCycle(g); r >= 0 {
		return &SchemaError{Pointer: strings.TrimPrefix(g.Rules[r].Name, "#"), Keyword: "$ref",
			Msg: "$ref: a cycle of references that consumes no input (" + g.Rules[r].Name + " reaches itself)"}
	}
	total := 0
	for _, r := range g.Rules {
		total = min(total+size(r.Body), MaxGrammarSize+1)
	}
	if total > MaxGrammarSize {
		return &SchemaError{Msg: fmt.Sprintf("schema too large: the grammar would have more than %d nodes", MaxGrammarSize)}
	}
	return nil
}

// productive tells, for each rule, whether it matches some string.
func productive(g *Grammar) []bool {
	prod := make([]bool, len(g.Rules))
	var ok func(e *Expr) bool
	ok = func(e *Expr) bool {
		switch e.Op {
		case OpRunes, OpBytes:
			return len(e.Ranges) > 0
		case OpSeq:
			for _, s := range e.Subs {
				if !ok(s) {
					return false
				}
			}
			return true
		case OpAlt:
			for _, s := range e.Subs {
				if ok(s) {
					return true
				}
			}
			return false
		case OpRepeat:
			return e.Min == 0 || ok(e.Subs[0])
		case OpRef:
			return prod[e.Rule]
		}
		return true
	}
	for changed := true; changed; {
		changed = false
		for i, r := range g.Rules {
			if !prod[i] && ok(r.Body) {
				prod[i], changed = true, true
			}
		}
	}
	return prod
}

// nullable tells, for each rule, whether it matches the empty string.
func nullable(g *Grammar) []bool {
	null := make([]bool, len(g.Rules))
	for changed := true; changed; {
		changed = false
		for i, r := range g.Rules {
			if !null[i] && exprNullable(r.Body, null) {
				null[i], changed = true, true
			}
		}
	}
	return null
}

func exprNullable(e *Expr, null []bool) bool {
	switch e.Op {
	case OpEmpty:
		return true
	case OpLit, OpRunes, OpBytes:
		return false
	case OpSeq:
		for _, s := range e.Subs {
			if !exprNullable(s, null) {
				return false
			}
		}
		return true
	case OpAlt:
		for _, s := range e.Subs {
			if exprNullable(s, null) {
				return true
			}
		}
		return false
	case OpRepeat:
		return e.Min == 0 || exprNullable(e.Subs[0], null)
	}
	return null[e.Rule]
}

// leftRefs adds to out the rules e may call before consuming a byte.
func leftRefs(e *Expr, null []bool, out map[int]bool) {
	switch e.Op {
	case OpRef:
		out[e.Rule] = true
	case OpSeq:
		for _, s := range e.Subs {
			leftRefs(s, null, out)
			if !exprNullable(s, null) {
				return
			}
		}
	case OpAlt, OpRepeat:
		for _, s := range e.Subs {
			leftRefs(s, null, out)
		}
	}
}

// leftCycle returns a rule that can reach itself without consuming a
// byte, or -1.
func leftCycle(g *Grammar) int {
	null := nullable(g)
	edges := make([][]int, len(g.Rules))
	for i, r := range g.Rules {
		set := map[int]bool{}
		leftRefs(r.Body, null, set)
		for j := range set {
			edges[i] = append(edges[i], j)
		}
	}
	const (
		unseen = iota
		open
		done
	)
	state := make([]int, len(g.Rules))
	var visit func(i int) int
	visit = func(i int) int {
		state[i] = open
		for _, j := range edges[i] {
			if state[j] == open {
				return j
			}
			if state[j] == unseen {
				if r := visit(j); r >= 0 {
					return r
				}
			}
		}
		state[i] = done
		return -1
	}
	for i := range g.Rules {
		if state[i] == unseen {
			if r := visit(i); r >= 0 {
				return r
			}
		}
	}
	return -1
}

// size counts e's nodes with bounded repeats expanded, saturating past
// MaxGrammarSize.
func size(e *Expr) int {
	n := 1 + len(e.Text) + len(e.Ranges)/2
	for _, s := range e.Subs {
		n += size(s)
	}
	if e.Op == OpRepeat {
		copies := max(e.Min, e.Max, 1)
		n = min(n*copies, MaxGrammarSize+1)
	}
	return min(n, MaxGrammarSize+1)
}
