package grammar

import (
	"math/rand/v2"
	"strings"
	"unicode/utf8"
)

// walker generates random strings of a grammar's language by a random
// walk over its expressions. Past a depth (rule calls) or an output size it
// takes, at each choice, the alternative of least cost and the fewest
// repetitions, so every walk ends: cost is the size of a smallest string,
// and a rule's call costs one more than its body, so the cheapest choices
// always descend.
type walker struct {
	g        *Grammar
	rng      *rand.Rand
	cost     []int // smallest derivation of each rule; inf when it matches nothing
	maxDepth int   // rule calls before the walk heads for the end
	maxLen   int   // output bytes before the walk heads for the end
}

const inf = 1 << 40

// newWalker returns a walker over g with a fixed seed.
func newWalker(g *Grammar, seed uint64) *walker {
	w := &walker{g: g, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), maxDepth: 60, maxLen: 600}
	w.cost = make([]int, len(g.Rules))
	for i := range w.cost {
		w.cost[i] = inf
	}
	for changed := true; changed; {
		changed = false
		for i, r := range g.Rules {
			if c := min(w.exprCost(r.Body)+1, inf); c < w.cost[i] {
				w.cost[i], changed = c, true
			}
		}
	}
	return w
}

// exprCost is the size of a smallest string of e given the rules' costs.
func (w *walker) exprCost(e *Expr) int {
	switch e.Op {
	case OpEmpty:
		return 0
	case OpRunes, OpBytes:
		if len(e.Ranges) == 0 {
			return inf
		}
		return 1
	case OpLit:
		return len(e.Text)
	case OpSeq:
		c := 0
		for _, s := range e.Subs {
			c = min(c+w.exprCost(s), inf)
		}
		return c
	case OpAlt:
		c := inf
		for _, s := range e.Subs {
			c = min(c, w.exprCost(s))
		}
		return c
	case OpRepeat:
		if e.Min == 0 {
			return 0
		}
		return min(w.exprCost(e.Subs[0])*e.Min, inf)
	}
	return w.cost[e.Rule]
}

// generate returns one random string of the grammar; ok is false when the
// grammar matches nothing.
func (w *walker) generate() (string, bool) {
	if w.cost[0] >= inf {
		return "", false
	}
	var sb strings.Builder
	w.expr(&sb, Ref(0), 0)
	return sb.String(), true
}

func (w *walker) deep(sb *strings.Builder, depth int) bool {
	return depth > w.maxDepth || sb.Len() > w.maxLen
}

func (w *walker) expr(sb *strings.Builder, e *Expr, depth int) {
	switch e.Op {
	case OpRunes:
		sb.WriteRune(w.pick(e.Ranges))
	case OpBytes:
		sb.WriteByte(byte(w.pick(e.Ranges)))
	case OpLit:
		sb.WriteString(e.Text)
	case OpSeq:
		for _, s := range e.Subs {
			w.expr(sb, s, depth)
		}
	case OpAlt:
		w.expr(sb, w.choose(sb, e.Subs, depth), depth)
	case OpRepeat:
		for range w.times(sb, e, depth) {
			w.expr(sb, e.Subs[0], depth)
		}
	case OpRef:
		w.expr(sb, w.g.Rules[e.Rule].Body, depth+1)
	}
}

// choose picks an alternative that matches something: any at random, or
// the cheapest when deep.
func (w *walker) choose(sb *strings.Builder, subs []*Expr, depth int) *Expr {
	var live []*Expr
	best := -1
	for _, s := range subs {
		c := w.exprCost(s)
		if c >= inf {
			continue
		}
		if best < 0 || c < w.exprCost(live[best]) {
			best = len(live)
		}
		live = append(live, s)
	}
	if w.deep(sb, depth) {
		return live[best]
	}
	return live[w.rng.IntN(len(live))]
}

// times is a repetition count: the minimum when deep or when the
// repeated expression matches nothing; else the minimum, the maximum (or a
// few more than the minimum when unbounded) or one between, each often.
func (w *walker) times(sb *strings.Builder, e *Expr, depth int) int {
	if w.deep(sb, depth) || w.exprCost(e.Subs[0]) >= inf {
		return e.Min
	}
	hi := e.Max
	if hi < 0 || hi > e.Min+12 {
		hi = e.Min + 4
		if e.Max >= 0 && w.rng.IntN(8) == 0 {
			hi = e.Max // now and then the maximum itself
		}
	}
	switch w.rng.IntN(4) {
	case 0:
		return e.Min
	case 1:
		return hi
	}
	return e.Min + w.rng.IntN(hi-e.Min+1)
}

// pick returns a random value in the ranges, often among the first few of
// a range so that ASCII and the range's edge show up, sometimes its last.
func (w *walker) pick(ranges []rune) rune {
	i := 2 * w.rng.IntN(len(ranges)/2)
	lo, hi := ranges[i], ranges[i+1]
	var r rune
	switch w.rng.IntN(4) {
	case 0:
		r = hi
	case 1:
		r = lo + rune(w.rng.Int64N(int64(hi-lo)+1))
	default:
		r = lo + rune(w.rng.Int64N(int64(min(hi-lo, 127))+1))
	}
	if !utf8.ValidRune(r) && lo <= utf8.MaxRune { // a range spanning the surrogates is never made; be safe
		r = lo
	}
	return r
}
