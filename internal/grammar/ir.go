// Package grammar constrains decoding to a formal language: a JSON Schema,
// a regular expression, a list of choices or a GBNF grammar is compiled to
// one grammar form (rules of expressions over characters), and a matcher
// over that form tells, after each token, which tokens of a vocabulary may
// come next. It is pure: no I/O, no goroutines, no clocks.
package grammar

import (
	"fmt"
	"slices"
	"unicode/utf8"
)

// Op is the kind of an Expr.
type Op uint8

const (
	// OpEmpty matches the empty string.
	OpEmpty Op = iota
	// OpRunes matches one character whose code point is in Ranges.
	OpRunes
	// OpBytes matches one byte in Ranges (each bound 0..255). It exists for
	// grammars that name raw bytes; front ends that speak of characters use
	// OpRunes, which is encoded as UTF-8.
	OpBytes
	// OpLit matches Text exactly (its UTF-8 bytes).
	OpLit
	// OpSeq matches Subs one after another.
	OpSeq
	// OpAlt matches any one of Subs; with no Subs it matches nothing.
	OpAlt
	// OpRepeat matches Subs[0] at least Min and at most Max times (Max < 0:
	// no bound).
	OpRepeat
	// OpRef matches rule number Rule of the grammar.
	OpRef
)

// Expr is an expression of a rule. Exprs are trees built by the
// constructors below and are not changed after they are built, so a
// subtree may be shared.
type Expr struct {
	Op Op
	// Ranges are inclusive [lo, hi] pairs, sorted and disjoint (OpRunes,
	// OpBytes).
	Ranges []rune
	Text   string  // OpLit
	Subs   []*Expr // OpSeq, OpAlt, OpRepeat (one)
	Min    int     // OpRepeat
	Max    int     // OpRepeat; < 0: unbounded
	Rule   int     // OpRef
}

// Rule is a named expression. Names are for errors and debugging.
type Rule struct {
	Name string
	Body *Expr
}

// Grammar is a set of rules; the language is that of rule 0. A grammar is
// built once and not changed after, so it may be shared between goroutines.
type Grammar struct {
	Rules []Rule
}

// Empty matches "".
func Empty() *Expr { return &Expr{Op: OpEmpty} }

// Nothing matches no string at all.
func Nothing() *Expr { return &Expr{Op: OpAlt} }

// Lit matches s.
func Lit(s string) *Expr {
	if s == "" {
		return Empty()
	}
	return &Expr{Op: OpLit, Text: s}
}

// Runes matches one character in the inclusive ranges lo0, hi0, lo1, hi1, …
// given in any order, overlapping or not. Surrogates and values above
// utf8.MaxRune are dropped: they have no UTF-8 encoding.
func Runes(ranges ...rune) *Expr {
	return &Expr{Op: OpRunes, Ranges: normalize(ranges, utf8.MaxRune, true)}
}

// Bytes matches one byte in the inclusive ranges lo0, hi0, … (0..255).
func Bytes(ranges ...rune) *Expr {
	return &Expr{Op: OpBytes, Ranges: normalize(ranges, 0xFF, false)}
}

// NotRunes matches one character that is in none of the given ranges.
func NotRunes(ranges ...rune) *Expr {
	in := normalize(ranges, utf8.MaxRune, true)
	var out []rune
	next := rune(0)
	for i := 0; i < len(in); i += 2 {
		if in[i] > next {
			out = append(out, next, in[i]-1)
		}
		next = in[i+1] + 1
	}
	if next <= utf8.MaxRune {
		out = append(out, next, utf8.MaxRune)
	}
	return Runes(out...)
}

// AnyRune matches any one character.
func AnyRune() *Expr { return Runes(0, utf8.MaxRune) }

// Seq matches its arguments one after another. Empty arguments are
// dropped; a single remaining argument is returned as it is.
func Seq(subs ...*Expr) *Expr {
	var keep []*Expr
	for _, s := range subs {
		switch s.Op {
		case OpEmpty:
		case OpSeq:
			keep = append(keep, s.Subs...)
		default:
			keep = append(keep, s)
		}
	}
	switch len(keep) {
	case 0:
		return Empty()
	case 1:
		return keep[0]
	}
	return &Expr{Op: OpSeq, Subs: keep}
}

// Alt matches any one of its arguments; with none it matches nothing.
func Alt(subs ...*Expr) *Expr {
	if len(subs) == 1 {
		return subs[0]
	}
	return &Expr{Op: OpAlt, Subs: subs}
}

// Repeat matches e at least lo and at most hi times; hi < 0 means no
// bound. It panics if lo < 0 or 0 <= hi < lo (a front end's bug; input is
// checked before).
func Repeat(e *Expr, lo, hi int) *Expr {
	if lo < 0 || (hi >= 0 && hi < lo) {
		panic(fmt.Sprintf("grammar: Repeat(%d, %d)", lo, hi))
	}
	if lo == 1 && hi == 1 {
		return e
	}
	if hi == 0 {
		return Empty()
	}
	return &Expr{Op: OpRepeat, Subs: []*Expr{e}, Min: lo, Max: hi}
}

// Opt matches e or "".
func Opt(e *Expr) *Expr { return Repeat(e, 0, 1) }

// Star matches e any number of times.
func Star(e *Expr) *Expr { return Repeat(e, 0, -1) }

// Plus matches e one or more times.
func Plus(e *Expr) *Expr { return Repeat(e, 1, -1) }

// Ref matches rule r.
func Ref(r int) *Expr { return &Expr{Op: OpRef, Rule: r} }

// Builder assembles a Grammar whose rules may refer to each other
// (recursion included): reserve a rule's number with Rule, use it with Ref,
// and give its body with Define.
type Builder struct {
	rules []Rule
}

// Rule reserves a rule and returns its number. The first rule reserved is
// the start rule.
func (b *Builder) Rule(name string) int {
	b.rules = append(b.rules, Rule{Name: name})
	return len(b.rules) - 1
}

// Define gives rule r its body.
func (b *Builder) Define(r int, body *Expr) { b.rules[r].Body = body }

// Grammar returns the grammar built. Every reserved rule must have a body,
// and every Ref must name a rule.
func (b *Builder) Grammar() (*Grammar, error) {
	g := &Grammar{Rules: slices.Clone(b.rules)}
	if len(g.Rules) == 0 {
		return nil, fmt.Errorf("grammar: no rules")
	}
	for _, r := range g.Rules {
		if r.Body == nil {
			return nil, fmt.Errorf("grammar: rule %q is used but never defined", r.Name)
		}
		if err := checkRefs(r.Body, len(g.Rules)); err != nil {
			return nil, fmt.Errorf("grammar: rule %q: %w", r.Name, err)
		}
	}
	return g, nil
}

// Single returns a grammar of one rule.
func Single(name string, body *Expr) *Grammar {
	return &Grammar{Rules: []Rule{{Name: name, Body: body}}}
}

func checkRefs(e *Expr, n int) error {
	if e.Op == OpRef && (e.Rule < 0 || e.Rule >= n) {
		return fmt.Errorf("reference to rule %d of %d", e.Rule, n)
	}
	for _, s := range e.Subs {
		if err := checkRefs(s, n); err != nil {
			return err
		}
	}
	return nil
}

// normalize sorts and merges inclusive ranges, clipping them to [0, top];
// with noSurrogates it removes U+D800..U+DFFF.
func normalize(r []rune, top rune, noSurrogates bool) []rune {
	if len(r)%2 != 0 {
		panic("grammar: odd number of range bounds")
	}
	type span struct{ lo, hi rune }
	var s []span
	for i := 0; i < len(r); i += 2 {
		lo, hi := max(r[i], 0), min(r[i+1], top)
		if lo > hi {
			continue
		}
		if noSurrogates && lo <= 0xDFFF && hi >= 0xD800 {
			if lo < 0xD800 {
				s = append(s, span{lo, 0xD7FF})
			}
			if hi > 0xDFFF {
				s = append(s, span{0xE000, hi})
			}
			continue
		}
		s = append(s, span{lo, hi})
	}
	slices.SortFunc(s, func(a, b span) int { return int(a.lo - b.lo) })
	var out []rune
	for _, x := range s {
		if n := len(out); n > 0 && x.lo <= out[n-1]+1 {
			out[n-1] = max(out[n-1], x.hi)
			continue
		}
		out = append(out, x.lo, x.hi)
	}
	return out
}
