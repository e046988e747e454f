package grammar

import (
	"unicode/utf8"
)

// recognizer tells whether a string is in a grammar's language, by
// computing the set of end positions of each expression from a start
// position (memoized per rule and position). It is a test oracle for
// exactness, independent of the matcher; it assumes no left recursion
// (FromJSONSchema refuses it).
type recognizer struct {
	g    *Grammar
	s    string
	memo map[[2]int][]int
}

// accepts reports whether s is a whole sentence of g.
func recognizes(g *Grammar, s string) bool {
	r := &recognizer{g: g, s: s, memo: map[[2]int][]int{}}
	for _, end := range r.ends(Ref(0), 0) {
		if end == len(s) {
			return true
		}
	}
	return false
}

func (r *recognizer) ends(e *Expr, i int) []int {
	switch e.Op {
	case OpEmpty:
		return []int{i}
	case OpLit:
		if len(r.s)-i >= len(e.Text) && r.s[i:i+len(e.Text)] == e.Text {
			return []int{i + len(e.Text)}
		}
		return nil
	case OpRunes, OpBytes:
		return r.one(e, i)
	case OpSeq:
		cur := []int{i}
		for _, sub := range e.Subs {
			cur = r.step(sub, cur)
		}
		return cur
	case OpAlt:
		set := map[int]bool{}
		for _, sub := range e.Subs {
			for _, j := range r.ends(sub, i) {
				set[j] = true
			}
		}
		return keys(set)
	case OpRepeat:
		return r.repeat(e, i)
	}
	key := [2]int{e.Rule, i}
	if out, ok := r.memo[key]; ok {
		return out
	}
	r.memo[key] = nil // a left-recursive call matches nothing
	out := r.ends(r.g.Rules[e.Rule].Body, i)
	r.memo[key] = out
	return out
}

// one matches one character (or byte) in e's ranges at i.
func (r *recognizer) one(e *Expr, i int) []int {
	if i >= len(r.s) {
		return nil
	}
	c, n := rune(r.s[i]), 1
	if e.Op == OpRunes {
		c, n = utf8.DecodeRuneInString(r.s[i:])
		if c == utf8.RuneError && n == 1 {
			return nil
		}
	}
	for k := 0; k < len(e.Ranges); k += 2 {
		if e.Ranges[k] <= c && c <= e.Ranges[k+1] {
			return []int{i + n}
		}
	}
	return nil
}

// step is the end positions of e from any of the positions cur.
func (r *recognizer) step(e *Expr, cur []int) []int {
	set := map[int]bool{}
	for _, j := range cur {
		for _, k := range r.ends(e, j) {
			set[k] = true
		}
	}
	return keys(set)
}

func (r *recognizer) repeat(e *Expr, i int) []int {
	out := map[int]bool{}
	cur := []int{i}
	seen := map[int]bool{}
	for n := 0; len(cur) > 0; n++ {
		if n >= e.Min {
			var fresh []int
			for _, j := range cur {
				if !seen[j] {
					seen[j], out[j] = true, true
					fresh = append(fresh, j)
				}
			}
			cur = fresh // a position seen after Min copies adds nothing new
		}
		if e.Max >= 0 && n == e.Max {
			break
		}
		cur = r.step(e.Subs[0], cur)
	}
	return keys(out)
}

func keys(set map[int]bool) []int {
	out := make([]int, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	return out
}
