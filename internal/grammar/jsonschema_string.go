package grammar

import (
	"fmt"
	"regexp/syntax"
	"strings"
	"unicode/utf8"
)

// str compiles a string schema: minLength and maxLength count characters
// (an escape is one), pattern is matched against the whole string, format
// is one of stringFormats. Beside pattern or format, the lengths are
// supported only when every match has a length in range already.
func (c *compiler) str(n *node, ptr string) (*Expr, error) {
	minLen, _, err := count(n, ptr, "minLength")
	if err != nil {
		return nil, err
	}
	maxLen, hasMax, err := count(n, ptr, "maxLength")
	if err != nil {
		return nil, err
	}
	if !hasMax {
		maxLen = -1
	}
	quote := Lit(`"`)
	pat, format := n.get("pattern"), n.get("format")
	if pat == nil && format == nil {
		if hasMax && maxLen < minLen {
			return Nothing(), nil
		}
		return Seq(quote, c.chars(minLen, maxLen), quote), nil
	}
	if pat != nil && format != nil {
		return nil, errAt(ptr, "format", "not supported beside pattern")
	}
	var body *Expr
	if pat != nil {
		body, err = patternExpr(pat, ptr)
	} else {
		body, err = formatExpr(format, ptr)
	}
	if err != nil {
		return nil, err
	}
	if err := lengthsHold(body, ptr, minLen, maxLen, pat != nil); err != nil {
		return nil, err
	}
	return Seq(quote, jsonEscape(body), quote), nil
}

// chars is lo to hi (< 0: any number of) JSON string characters.
func (c *compiler) chars(lo, hi int) *Expr {
	if hi < 0 && lo == 0 {
		return Star(jsonChar())
	}
	if c.char < 0 {
		c.char = c.b.Rule("char")
		c.b.Define(c.char, jsonChar())
	}
	return Repeat(Ref(c.char), lo, hi)
}

// count reads keyword k, a count from 0 to MaxRepeat.
func count(n *node, ptr, k string) (int, bool, error) {
	v := n.get(k)
	if v == nil {
		return 0, false, nil
	}
	d, err := splitDecimal(v.str)
	if v.kind != kNumber || err != nil || d.neg || d.exp < 0 {
		return 0, false, errAt(ptr, k, "must be a non-negative integer")
	}
	if len(d.digits)+d.exp > 6 || d.value() > MaxRepeat {
		return 0, false, errAt(ptr, k, "schema too large: at most %d", MaxRepeat)
	}
	return d.value(), true, nil
}

// lengthsHold checks that every string of e (over characters) has a length
// within [minLen, maxLen] (maxLen < 0: no bound): only then are minLength
// and maxLength honoured beside a pattern or a format.
func lengthsHold(e *Expr, ptr string, minLen, maxLen int, isPattern bool) error {
	lo, hi := lengthRange(e)
	beside := "format"
	if isPattern {
		beside = "pattern"
	}
	hiText := "any number of"
	if hi >= 0 {
		hiText = fmt.Sprint(hi)
	}
	msg := "supported beside %s only when every match of it has a length in range already (its matches have %d to %s characters)"
	if lo < minLen {
		return errAt(ptr, "minLength", msg, beside, lo, hiText)
	}
	if maxLen >= 0 && (hi < 0 || hi > maxLen) {
		return errAt(ptr, "maxLength", msg, beside, lo, hiText)
	}
	return nil
}

// lengthRange is the least and the greatest number of characters of a
// string of e (greatest < 0: unbounded). A language with no string gives
// (maxInt, 0), which every bound accepts.
func lengthRange(e *Expr) (lo, hi int) {
	const none, capLen = int(^uint(0) >> 2), 1 << 30
	switch e.Op {
	case OpEmpty:
		return 0, 0
	case OpRunes, OpBytes:
		if len(e.Ranges) == 0 {
			return none, 0
		}
		return 1, 1
	case OpLit:
		n := utf8.RuneCountInString(e.Text)
		return n, n
	case OpSeq:
		for _, s := range e.Subs {
			l, h := lengthRange(s)
			lo, hi = min(lo+l, none), addLen(hi, h, capLen)
		}
		return lo, hi
	case OpAlt:
		lo = none
		for _, s := range e.Subs {
			l, h := lengthRange(s)
			if l < none {
				lo, hi = min(lo, l), maxOrUnbounded(hi, h)
			}
		}
		return lo, hi
	case OpRepeat:
		l, h := lengthRange(e.Subs[0])
		if l >= none {
			return 0, 0 // only zero copies can match
		}
		if e.Max < 0 && h != 0 {
			return min(l*e.Min, none), -1
		}
		return min(l*e.Min, none), mulLen(h, e.Max, capLen)
	}
	return 0, -1 // not made by FromRegexp; say unbounded
}

func addLen(a, b, capLen int) int {
	if a < 0 || b < 0 {
		return -1
	}
	return min(a+b, capLen)
}

func maxOrUnbounded(a, b int) int {
	if a < 0 || b < 0 {
		return -1
	}
	return max(a, b)
}

func mulLen(h, n, capLen int) int {
	if h < 0 {
		return -1
	}
	return min(h*max(n, 0), capLen)
}

// patternExpr reads pattern: an ECMA-262 regular expression in the RE2
// subset, matched against the whole string. ECMA's \uXXXX is read as a
// code point and `.` as any character but \n, \r, U+2028 and U+2029, as in
// ECMA-262.
func patternExpr(pat *node, ptr string) (*Expr, error) {
	if pat.kind != kString {
		return nil, errAt(ptr, "pattern", "must be a string")
	}
	re, err := syntax.Parse(ecmaEscapes(pat.str), syntax.Perl)
	if err != nil {
		return nil, errAt(ptr, "pattern", "%v", err)
	}
	ecmaDot(re)
	e, err := FromRegexp(re.String())
	if err != nil {
		return nil, errAt(ptr, "pattern", "%v", err)
	}
	return e, nil
}

// ecmaEscapes rewrites ECMA-262's \uXXXX as RE2's \x{XXXX}.
func ecmaEscapes(p string) string {
	var sb strings.Builder
	for i := 0; i < len(p); i++ {
		if p[i] != '\\' || i+1 >= len(p) {
			sb.WriteByte(p[i])
			continue
		}
		if p[i+1] == 'u' && i+6 <= len(p) && isHex(p[i+2:i+6]) {
			sb.WriteString(`\x{` + p[i+2:i+6] + `}`)
			i += 5
			continue
		}
		sb.WriteString(p[i : i+2])
		i++
	}
	return sb.String()
}

func isHex(s string) bool {
	for _, r := range s {
		if !strings.ContainsRune("0123456789abcdefABCDEF", r) {
			return false
		}
	}
	return true
}

// ecmaDot makes each `.` of re (not in (?s) mode) exclude the line
// terminators of ECMA-262: \n, \r, U+2028 and U+2029.
func ecmaDot(re *syntax.Regexp) {
	if re.Op == syntax.OpAnyCharNotNL {
		re.Op = syntax.OpCharClass
		re.Rune = []rune{0, '\n' - 1, '\n' + 1, '\r' - 1, '\r' + 1, 0x2027, 0x202A, utf8.MaxRune}
	}
	for _, s := range re.Sub {
		ecmaDot(s)
	}
}

// jsonEscape turns an expression over the characters of a string into one
// over its JSON text: `"`, `\` and control characters escaped (each in
// every form JSON allows), `/` as it is or as \/.
func jsonEscape(e *Expr) *Expr {
	switch e.Op {
	case OpRunes:
		return jsonRunes(e.Ranges)
	case OpLit:
		if !strings.ContainsFunc(e.Text, needsEscape) {
			return e
		}
		var subs []*Expr
		for _, r := range e.Text {
			subs = append(subs, jsonRunes([]rune{r, r}))
		}
		return Seq(subs...)
	case OpSeq, OpAlt, OpRepeat:
		out := *e
		out.Subs = make([]*Expr, len(e.Subs))
		for i, s := range e.Subs {
			out.Subs[i] = jsonEscape(s)
		}
		return &out
	}
	return e
}

func needsEscape(r rune) bool { return r < 0x20 || r == '"' || r == '\\' || r == '/' }

// jsonRunes is one character in ranges as JSON string text.
func jsonRunes(ranges []rune) *Expr {
	has := func(c rune) bool {
		for i := 0; i < len(ranges); i += 2 {
			if ranges[i] <= c && c <= ranges[i+1] {
				return true
			}
		}
		return false
	}
	var alts []*Expr
	if plain := intersect(ranges, NotRunes(0, 0x1F, '"', '"', '\\', '\\').Ranges); len(plain) > 0 {
		alts = append(alts, &Expr{Op: OpRunes, Ranges: plain})
	}
	for _, c := range []rune{'"', '\\', '/'} {
		if has(c) {
			alts = append(alts, Lit(`\`+string(c)))
		}
	}
	var nibbles [2][]int
	for c := rune(0); c < 0x20; c++ {
		if !has(c) {
			continue
		}
		if short, ok := shortEscapes[c]; ok {
			alts = append(alts, Lit(short))
		}
		nibbles[c>>4] = append(nibbles[c>>4], int(c&0xF))
	}
	for hi, set := range nibbles {
		if len(set) > 0 {
			alts = append(alts, Seq(Lit(fmt.Sprintf(`\u00%d`, hi)), hexOf(set)))
		}
	}
	return Alt(alts...)
}

// hexOf is one hex digit (either case) of the values in set (0..15).
func hexOf(set []int) *Expr {
	var r []rune
	for _, v := range set {
		if v < 10 {
			r = append(r, rune('0'+v), rune('0'+v))
		} else {
			r = append(r, rune('a'+v-10), rune('a'+v-10), rune('A'+v-10), rune('A'+v-10))
		}
	}
	return Runes(r...)
}

// intersect is the intersection of two normalized range lists.
func intersect(a, b []rune) []rune {
	var out []rune
	for i, j := 0, 0; i < len(a) && j < len(b); {
		lo, hi := max(a[i], b[j]), min(a[i+1], b[j+1])
		if lo <= hi {
			out = append(out, lo, hi)
		}
		if a[i+1] < b[j+1] {
			i += 2
		} else {
			j += 2
		}
	}
	return out
}

// stringFormats are the formats FromJSONSchema makes exact, as expressions
// over the characters of the string.
var stringFormats = map[string]func() *Expr{
	"date":      dateExpr,
	"time":      timeExpr,
	"date-time": func() *Expr { return Seq(dateExpr(), Lit("T"), timeExpr()) },
	"uuid": func() *Expr {
		h := hexDigit()
		return Seq(Repeat(h, 8, 8), Lit("-"), Repeat(h, 4, 4), Lit("-"), Repeat(h, 4, 4), Lit("-"),
			Repeat(h, 4, 4), Lit("-"), Repeat(h, 12, 12))
	},
	"ipv4": func() *Expr {
		octet := Alt(Seq(Lit("25"), Runes('0', '5')), Seq(Lit("2"), Runes('0', '4'), digit()),
			Seq(Lit("1"), digit(), digit()), Seq(Runes('1', '9'), digit()), digit())
		return Seq(octet, Lit("."), octet, Lit("."), octet, Lit("."), octet)
	},
}

// formatExpr reads format.
func formatExpr(f *node, ptr string) (*Expr, error) {
	if f.kind != kString {
		return nil, errAt(ptr, "format", "must be a string")
	}
	mk, ok := stringFormats[f.str]
	if !ok {
		return nil, errAt(ptr, "format", "%q is not supported (supported: date, time, date-time, uuid, ipv4)", f.str)
	}
	return mk(), nil
}

// dateExpr is an RFC 3339 full-date: YYYY-MM-DD with the day valid in its
// month, February 29 in leap years only (Gregorian, year 0000 included).
func dateExpr() *Expr {
	lits := func(ss ...string) *Expr {
		alts := make([]*Expr, len(ss))
		for i, s := range ss {
			alts[i] = Lit(s)
		}
		return Alt(alts...)
	}
	day28 := Alt(Seq(Lit("0"), Runes('1', '9')), Seq(Lit("1"), digit()), Seq(Lit("2"), Runes('0', '8')))
	day30 := Alt(day28, lits("29", "30"))
	day31 := Alt(day28, lits("29", "30", "31"))
	monthDay := Alt(Seq(lits("01", "03", "05", "07", "08", "10", "12"), Lit("-"), day31),
		Seq(lits("04", "06", "09", "11"), Lit("-"), day30), Seq(Lit("02-"), day28))
	by4 := Alt(Seq(Lit("0"), Runes('4', '4', '8', '8')), Seq(Runes('2', '2', '4', '4', '6', '6', '8', '8'), Runes('0', '0', '4', '4', '8', '8')),
		Seq(Runes('1', '1', '3', '3', '5', '5', '7', '7', '9', '9'), Runes('2', '2', '6', '6')))
	leapYear := Alt(Seq(digit(), digit(), by4), Seq(by4, Lit("00")), Lit("0000"))
	return Alt(Seq(Repeat(digit(), 4, 4), Lit("-"), monthDay), Seq(leapYear, Lit("-02-29")))
}

// timeExpr is an RFC 3339 full-time: HH:MM:SS, an optional fraction of 1
// to 9 digits, and Z or an offset ±HH:MM. Leap seconds (:60) are not
// generated.
func timeExpr() *Expr {
	hh := Alt(Seq(Runes('0', '1'), digit()), Seq(Lit("2"), Runes('0', '3')))
	mm := Seq(Runes('0', '5'), digit())
	frac := Opt(Seq(Lit("."), Repeat(digit(), 1, 9)))
	offset := Alt(Lit("Z"), Seq(Runes('+', '+', '-', '-'), hh, Lit(":"), mm))
	return Seq(hh, Lit(":"), mm, Lit(":"), mm, frac, offset)
}
