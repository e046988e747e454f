package grammar

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Bounds of a GBNF source: how deeply groups nest and the largest count in
// a {m,n} repeat (the automaton's size is bounded by Limits.MaxStates).
const (
	maxGBNFNesting = 1000
	maxGBNFRepeat  = 100_000
)

// ParseGBNF reads a grammar in llama.cpp's GBNF; the start rule is "root".
// The subset read:
//
//   - rules `name ::= alternatives`, one per line; names are letters,
//     digits, '-' and '_'. A rule's body continues on the next lines
//     inside parentheses, after a '|', or on a line that starts with '|'.
//     Rules may be used before they are defined and may recurse (but not
//     left-recursively: Compile refuses that). Defining a rule twice is an
//     error.
//   - alternatives `a | b`, sequences `a b`, groups `( … )`, an empty
//     alternative or group matching "".
//   - literals "…" and character classes [a-z0-9_] or negated [^"\\];
//     `.` is any character. Escapes in both: \n \r \t \\ \" \[ \] \- and
//     \xHH, \uHHHH, \UHHHHHHHH, each a code point (so \xE9 is é, as in
//     llama.cpp) that is matched as its UTF-8 bytes.
//   - postfix operators * + ? {m} {m,} {m,n} {,n} (several may follow one
//     another); counts are at most 100,000.
//   - comments from # to the end of the line.
//
// Not read: token references <…> and !<…> (refused with an error). Errors
// give the line and column (in characters, from 1).
func ParseGBNF(src string) (*Grammar, error) {
	if !utf8.ValidString(src) {
		return nil, fmt.Errorf("gbnf: the source is not valid UTF-8")
	}
	p := &gbnfParser{src: src, ids: map[string]int{}, used: map[string]int{}}
	p.ruleID("root", -1)
	if err := p.parse(); err != nil {
		return nil, err
	}
	return p.grammar()
}

type gbnfParser struct {
	src     string
	pos     int
	b       Builder
	ids     map[string]int // rule name → number
	used    map[string]int // rule name → offset of its first use
	defined []bool
	depth   int
}

// gbnfError is a parse error at an offset, reported as line:column.
func (p *gbnfParser) errorf(at int, format string, args ...any) error {
	before := p.src[:at]
	line := strings.Count(before, "\n") + 1
	col := utf8.RuneCountInString(before[strings.LastIndexByte(before, '\n')+1:]) + 1
	return fmt.Errorf("gbnf: %d:%d: %s", line, col, fmt.Sprintf(format, args...))
}

// ruleID returns the number of rule name, reserving it at its first
// mention; at is the offset of a use (-1 for a definition or root).
func (p *gbnfParser) ruleID(name string, at int) int {
	id, ok := p.ids[name]
	if !ok {
		id = p.b.Rule(name)
		p.ids[name] = id
		p.defined = append(p.defined, false)
	}
	if _, ok := p.used[name]; !ok && at >= 0 {
		p.used[name] = at
	}
	return id
}

func (p *gbnfParser) grammar() (*Grammar, error) {
	if !p.defined[0] {
		return nil, fmt.Errorf("gbnf: no rule named root (the start rule)")
	}
	for name, id := range p.ids {
		if !p.defined[id] {
			return nil, p.errorf(p.used[name], "rule %q is used but never defined", name)
		}
	}
	return p.b.Grammar()
}

func (p *gbnfParser) parse() error {
	for {
		p.space(true)
		if p.pos >= len(p.src) {
			return nil
		}
		if err := p.rule(); err != nil {
			return err
		}
	}
}

func (p *gbnfParser) rule() error {
	at := p.pos
	name := p.name()
	if name == "" {
		return p.errorf(at, "expecting a rule name")
	}
	p.space(false)
	if !strings.HasPrefix(p.src[p.pos:], "::=") {
		return p.errorf(p.pos, "expecting ::= after rule name %q", name)
	}
	p.pos += 3
	p.space(true)
	id := p.ruleID(name, -1)
	if p.defined[id] {
		return p.errorf(at, "rule %q is defined twice", name)
	}
	p.defined[id] = true
	body, err := p.alternatives(false)
	if err != nil {
		return err
	}
	p.b.Define(id, body)
	p.space(false)
	if p.pos < len(p.src) && p.src[p.pos] != '\n' && p.src[p.pos] != '\r' {
		return p.errorf(p.pos, "expecting the end of the line after rule %q, found %q", name, p.peekRune())
	}
	return nil
}

func (p *gbnfParser) name() string {
	start := p.pos
	for p.pos < len(p.src) && isGBNFNameByte(p.src[p.pos]) {
		p.pos++
	}
	return p.src[start:p.pos]
}

func isGBNFNameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

func (p *gbnfParser) peekRune() rune {
	r, _ := utf8.DecodeRuneInString(p.src[p.pos:])
	return r
}

// space skips blanks and comments, and newlines too if newlines.
func (p *gbnfParser) space(newlines bool) {
	for p.pos < len(p.src) {
		switch c := p.src[p.pos]; {
		case c == ' ' || c == '\t':
			p.pos++
		case c == '#':
			for p.pos < len(p.src) && p.src[p.pos] != '\n' && p.src[p.pos] != '\r' {
				p.pos++
			}
		case (c == '\n' || c == '\r') && newlines:
			p.pos++
		default:
			return
		}
	}
}

// continuation reports whether, at the end of a line outside parentheses,
// the next line starts with '|' (continuing the alternatives); if so it
// moves there.
func (p *gbnfParser) continuation() bool {
	save := p.pos
	p.space(true)
	if p.pos < len(p.src) && p.src[p.pos] == '|' {
		return true
	}
	p.pos = save
	return false
}

func (p *gbnfParser) alternatives(nested bool) (*Expr, error) {
	var alts []*Expr
	for {
		seq, err := p.sequence(nested)
		if err != nil {
			return nil, err
		}
		alts = append(alts, seq)
		if p.pos < len(p.src) && p.src[p.pos] == '|' || !nested && p.continuation() {
			p.pos++
			p.space(true)
			continue
		}
		return Alt(alts...), nil
	}
}

func (p *gbnfParser) sequence(nested bool) (*Expr, error) {
	var items []*Expr
	for {
		p.space(nested)
		if p.pos >= len(p.src) {
			return Seq(items...), nil
		}
		switch p.src[p.pos] {
		case '|', ')', '\n', '\r':
			return Seq(items...), nil
		}
		e, err := p.element()
		if err != nil {
			return nil, err
		}
		if e, err = p.postfix(e); err != nil {
			return nil, err
		}
		items = append(items, e)
	}
}

func (p *gbnfParser) element() (*Expr, error) {
	at := p.pos
	switch c := p.src[p.pos]; {
	case c == '"':
		return p.literal()
	case c == '[':
		return p.class()
	case c == '.':
		p.pos++
		return AnyRune(), nil
	case c == '(':
		return p.group()
	case c == '<' || c == '!':
		return nil, p.errorf(at, "token references (<…>, !<…>) are not supported")
	case isGBNFNameByte(c):
		name := p.name()
		if strings.HasPrefix(p.src[p.pos:], "::=") || strings.HasPrefix(strings.TrimLeft(p.src[p.pos:], " \t"), "::=") {
			return nil, p.errorf(at, "rule %q starts inside another rule's body (a missing ')' or newline?)", name)
		}
		return Ref(p.ruleID(name, at)), nil
	}
	return nil, p.errorf(at, "expecting a literal, a character class, '.', '(' or a rule name, found %q", p.peekRune())
}

func (p *gbnfParser) group() (*Expr, error) {
	at := p.pos
	if p.depth++; p.depth > maxGBNFNesting {
		return nil, p.errorf(at, "groups nested deeper than %d", maxGBNFNesting)
	}
	p.pos++
	p.space(true)
	e, err := p.alternatives(true)
	if err != nil {
		return nil, err
	}
	if p.pos >= len(p.src) || p.src[p.pos] != ')' {
		return nil, p.errorf(at, "'(' is never closed")
	}
	p.pos++
	p.depth--
	return e, nil
}

func (p *gbnfParser) literal() (*Expr, error) {
	at := p.pos
	p.pos++
	var sb strings.Builder
	for {
		if p.pos >= len(p.src) || p.src[p.pos] == '\n' || p.src[p.pos] == '\r' {
			return nil, p.errorf(at, "literal is never closed (a \" before the end of the line)")
		}
		if p.src[p.pos] == '"' {
			p.pos++
			return Lit(sb.String()), nil
		}
		r, err := p.char()
		if err != nil {
			return nil, err
		}
		sb.WriteRune(r)
	}
}

func (p *gbnfParser) class() (*Expr, error) {
	at := p.pos
	p.pos++
	negate := p.pos < len(p.src) && p.src[p.pos] == '^'
	if negate {
		p.pos++
	}
	var ranges []rune
	for {
		if p.pos >= len(p.src) || p.src[p.pos] == '\n' || p.src[p.pos] == '\r' {
			return nil, p.errorf(at, "character class is never closed (a ] before the end of the line)")
		}
		if p.src[p.pos] == ']' {
			p.pos++
			break
		}
		lo, err := p.char()
		if err != nil {
			return nil, err
		}
		hi := lo
		if p.pos+1 < len(p.src) && p.src[p.pos] == '-' && p.src[p.pos+1] != ']' {
			dash := p.pos
			p.pos++
			if hi, err = p.char(); err != nil {
				return nil, err
			}
			if hi < lo {
				return nil, p.errorf(dash, "range %q-%q is backwards", lo, hi)
			}
		}
		ranges = append(ranges, lo, hi)
	}
	if negate {
		return NotRunes(ranges...), nil
	}
	return Runes(ranges...), nil
}

// char reads one character of a literal or class, escapes included.
func (p *gbnfParser) char() (rune, error) {
	at := p.pos
	r, n := utf8.DecodeRuneInString(p.src[p.pos:])
	p.pos += n
	if r != '\\' {
		return r, nil
	}
	if p.pos >= len(p.src) {
		return 0, p.errorf(at, "escape at the end of the input")
	}
	c := p.src[p.pos]
	p.pos++
	switch c {
	case 'n':
		return '\n', nil
	case 'r':
		return '\r', nil
	case 't':
		return '\t', nil
	case '\\', '"', '[', ']', '-':
		return rune(c), nil
	case 'x', 'u', 'U':
		digits := map[byte]int{'x': 2, 'u': 4, 'U': 8}[c]
		if p.pos+digits > len(p.src) {
			return 0, p.errorf(at, "\\%c needs %d hex digits", c, digits)
		}
		v, err := strconv.ParseUint(p.src[p.pos:p.pos+digits], 16, 32)
		if err != nil {
			return 0, p.errorf(at, "\\%c needs %d hex digits, found %q", c, digits, p.src[p.pos:p.pos+digits])
		}
		p.pos += digits
		if !utf8.ValidRune(rune(v)) {
			return 0, p.errorf(at, "U+%04X is not a character (a surrogate or above U+10FFFF)", v)
		}
		return rune(v), nil
	}
	return 0, p.errorf(at, "unknown escape \\%c", c)
}

// postfix applies the repeat operators after an element.
func (p *gbnfParser) postfix(e *Expr) (*Expr, error) {
	for p.pos < len(p.src) {
		switch p.src[p.pos] {
		case '*':
			e = Star(e)
		case '+':
			e = Plus(e)
		case '?':
			e = Opt(e)
		case '{':
			lo, hi, err := p.braces()
			if err != nil {
				return nil, err
			}
			e = Repeat(e, lo, hi)
			continue
		default:
			return e, nil
		}
		p.pos++
	}
	return e, nil
}

// braces reads {m}, {m,}, {m,n} or {,n}; hi < 0 for no bound.
func (p *gbnfParser) braces() (lo, hi int, err error) {
	at := p.pos
	end := strings.IndexByte(p.src[p.pos:], '}')
	if end < 0 {
		return 0, 0, p.errorf(at, "'{' is never closed")
	}
	body := strings.ReplaceAll(p.src[p.pos+1:p.pos+end], " ", "")
	p.pos += end + 1
	num := func(s string, def int) (int, error) {
		if s == "" {
			return def, nil
		}
		v, err := strconv.Atoi(s)
		if err != nil || v < 0 || v > maxGBNFRepeat || strings.TrimLeft(s, "0123456789") != "" {
			return 0, p.errorf(at, "repeat count %q is not a number from 0 to %d", s, maxGBNFRepeat)
		}
		return v, nil
	}
	loS, hiS, comma := strings.Cut(body, ",")
	if lo, err = num(loS, 0); err != nil {
		return 0, 0, err
	}
	hi = lo
	if comma {
		if hi, err = num(hiS, -1); err != nil {
			return 0, 0, err
		}
	} else if loS == "" {
		return 0, 0, p.errorf(at, "empty repeat {}")
	}
	if hi >= 0 && hi < lo {
		return 0, 0, p.errorf(at, "repeat {%s} has its maximum below its minimum", body)
	}
	return lo, hi, nil
}
