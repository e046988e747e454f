package grammar

import (
	"fmt"
	"regexp/syntax"
	"unicode"
)

// MaxRegexpLen bounds the source of a regular expression.
const MaxRegexpLen = 16 << 10

// FromRegexp returns the expression of a regular expression in Go's RE2
// syntax (regexp/syntax, Perl flags), matched against the whole string: a
// leading ^ and a trailing $ are allowed and change nothing, since a
// constrained output is always matched whole. Anchors and word boundaries
// anywhere else are refused, as they are not a set of strings that a
// left-to-right matcher can hold. Case folding is expanded into the
// alternatives.
func FromRegexp(pattern string) (*Expr, error) {
	if len(pattern) > MaxRegexpLen {
		return nil, fmt.Errorf("regular expression is %d bytes, at most %d", len(pattern), MaxRegexpLen)
	}
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return nil, fmt.Errorf("regular expression: %w", err)
	}
	re = re.Simplify()
	re = trimAnchors(re)
	return fromSyntax(re)
}

// trimAnchors drops a ^ or \A at the start and a $ or \z at the end of a
// concatenation (or the whole expression).
func trimAnchors(re *syntax.Regexp) *syntax.Regexp {
	isBegin := func(r *syntax.Regexp) bool { return r.Op == syntax.OpBeginText || r.Op == syntax.OpBeginLine }
	isEnd := func(r *syntax.Regexp) bool { return r.Op == syntax.OpEndText || r.Op == syntax.OpEndLine }
	if isBegin(re) || isEnd(re) {
		return &syntax.Regexp{Op: syntax.OpEmptyMatch}
	}
	if re.Op != syntax.OpConcat {
		return re
	}
	subs := re.Sub
	if len(subs) > 0 && isBegin(subs[0]) {
		subs = subs[1:]
	}
	if len(subs) > 0 && isEnd(subs[len(subs)-1]) {
		subs = subs[:len(subs)-1]
	}
	return &syntax.Regexp{Op: syntax.OpConcat, Sub: subs, Flags: re.Flags}
}

func fromSyntax(re *syntax.Regexp) (*Expr, error) {
	switch re.Op {
	case syntax.OpNoMatch:
		return Nothing(), nil
	case syntax.OpEmptyMatch:
		return Empty(), nil
	case syntax.OpLiteral:
		return literal(re.Rune, re.Flags&syntax.FoldCase != 0), nil
	case syntax.OpCharClass:
		return Runes(re.Rune...), nil
	case syntax.OpAnyCharNotNL:
		return NotRunes('\n', '\n'), nil
	case syntax.OpAnyChar:
		return AnyRune(), nil
	case syntax.OpCapture:
		return fromSyntax(re.Sub[0])
	case syntax.OpStar, syntax.OpPlus, syntax.OpQuest, syntax.OpRepeat:
		sub, err := fromSyntax(re.Sub[0])
		if err != nil {
			return nil, err
		}
		lo, hi := repeatBounds(re)
		return Repeat(sub, lo, hi), nil
	case syntax.OpConcat, syntax.OpAlternate:
		subs := make([]*Expr, len(re.Sub))
		for i, s := range re.Sub {
			e, err := fromSyntax(s)
			if err != nil {
				return nil, err
			}
			subs[i] = e
		}
		if re.Op == syntax.OpConcat {
			return Seq(subs...), nil
		}
		return Alt(subs...), nil
	}
	return nil, fmt.Errorf("regular expression: %s is not supported inside an expression (only a leading ^ and a trailing $ are)", opName(re))
}

func repeatBounds(re *syntax.Regexp) (int, int) {
	switch re.Op {
	case syntax.OpStar:
		return 0, -1
	case syntax.OpPlus:
		return 1, -1
	case syntax.OpQuest:
		return 0, 1
	}
	return re.Min, re.Max // Max is -1 for {n,}
}

// literal matches the runes rs, each folded to all its cases when fold.
func literal(rs []rune, fold bool) *Expr {
	if !fold {
		return Lit(string(rs))
	}
	subs := make([]*Expr, len(rs))
	for i, r := range rs {
		var ranges []rune
		for f := r; ; {
			ranges = append(ranges, f, f)
			if f = unicode.SimpleFold(f); f == r {
				break
			}
		}
		subs[i] = Runes(ranges...)
	}
	return Seq(subs...)
}

func opName(re *syntax.Regexp) string {
	switch re.Op {
	case syntax.OpBeginLine, syntax.OpBeginText:
		return "a start anchor (^ or \\A)"
	case syntax.OpEndLine, syntax.OpEndText:
		return "an end anchor ($ or \\z)"
	case syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		return "a word boundary (\\b or \\B)"
	}
	return fmt.Sprintf("operator %v", re.Op)
}
