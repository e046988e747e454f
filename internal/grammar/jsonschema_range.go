package grammar

import (
	"math/big"
	"strings"
)

// intRange is the integers from lo to hi (nil: no bound) in canonical
// decimal form.
func intRange(lo, hi *big.Int) *Expr {
	if lo != nil && hi != nil && lo.Cmp(hi) > 0 {
		return Nothing()
	}
	var alts []*Expr
	if lo == nil || lo.Sign() < 0 { // -b … -a
		a := big.NewInt(1)
		if hi != nil && hi.Sign() < 0 {
			a = new(big.Int).Neg(hi)
		}
		var b *big.Int
		if lo != nil {
			b = new(big.Int).Neg(lo)
		}
		alts = append(alts, Seq(Lit("-"), natRange(a, b)))
	}
	if hi == nil || hi.Sign() >= 0 {
		a := new(big.Int)
		if lo != nil && lo.Sign() > 0 {
			a = lo
		}
		alts = append(alts, natRange(a, hi))
	}
	return Alt(alts...)
}

// natRange is the integers from a >= 0 to b >= a (nil: no bound), split
// by number of digits: the part of a's length, the lengths between (in
// one repeat), the part of b's length.
func natRange(a, b *big.Int) *Expr {
	as := a.String()
	la := len(as)
	if b == nil {
		return Alt(sameLen(as, strings.Repeat("9", la)), Seq(Runes('1', '9'), Repeat(digit(), la, -1)))
	}
	bs := b.String()
	lb := len(bs)
	if la == lb {
		return sameLen(as, bs)
	}
	alts := []*Expr{sameLen(as, strings.Repeat("9", la))}
	if lb-la >= 2 {
		alts = append(alts, Seq(Runes('1', '9'), Repeat(digit(), la, lb-2)))
	}
	return Alt(append(alts, sameLen("1"+strings.Repeat("0", lb-1), bs))...)
}

// sameLen is the digit strings from lo to hi, both of one length.
func sameLen(lo, hi string) *Expr {
	if lo == "" {
		return Empty()
	}
	if lo[0] == hi[0] {
		return Seq(Lit(lo[:1]), sameLen(lo[1:], hi[1:]))
	}
	rest := len(lo) - 1
	first, last := rune(lo[0]), rune(hi[0])
	var alts []*Expr
	if strings.Trim(lo[1:], "0") != "" {
		alts = append(alts, Seq(Lit(lo[:1]), sameLen(lo[1:], strings.Repeat("9", rest))))
		first++
	}
	lastPartial := strings.Trim(hi[1:], "9") != ""
	if lastPartial {
		last--
	}
	if first <= last {
		alts = append(alts, Seq(Runes(first, last), Repeat(digit(), rest, rest)))
	}
	if lastPartial {
		alts = append(alts, Seq(Lit(hi[:1]), sameLen(strings.Repeat("0", rest), hi[1:])))
	}
	return Alt(alts...)
}

// numRange is the decimals within the bounds (nil: none), without
// exponent or -0: the non-negative part, then "-" and the magnitudes of the
// negative part.
func numRange(lo, hi *limit) *Expr {
	zero := decimal{ip: new(big.Int)}
	var alts []*Expr
	if hi == nil || hi.d.rat().Sign() > 0 || hi.d.rat().Sign() == 0 && !hi.excl {
		l := limit{d: zero}
		if lo != nil && lo.d.rat().Sign() >= 0 {
			l = *lo
		}
		alts = append(alts, posRange(l, hi))
	}
	if lo == nil || lo.d.rat().Sign() < 0 {
		l := limit{d: zero, excl: true}
		if hi != nil && hi.d.rat().Sign() < 0 {
			l = limit{d: hi.d.abs(), excl: hi.excl}
		}
		var u *limit
		if lo != nil {
			u = &limit{d: lo.d.abs(), excl: lo.excl}
		}
		alts = append(alts, Seq(Lit("-"), posRange(l, u)))
	}
	return Alt(alts...)
}

// posRange is the non-negative decimals from a to b (nil: no bound): the
// integer part of a with a fraction at least a's, the integer parts
// between with any fraction, the integer part of b with a fraction at most
// b's.
func posRange(a limit, b *limit) *Expr {
	A, aIn := a.d.ip, !a.excl
	atA := func(u *string, uIn bool) *Expr {
		return Seq(Lit(A.String()), fracSuffix(between(a.d.frac, aIn, u, uIn)))
	}
	next := new(big.Int).Add(A, big.NewInt(1))
	if b == nil {
		return Alt(atA(nil, false), Seq(natRange(next, nil), anyFrac()))
	}
	if c := a.d.rat().Cmp(b.d.rat()); c > 0 || c == 0 && (a.excl || b.excl) {
		return Nothing()
	}
	B, bIn := b.d.ip, !b.excl
	if A.Cmp(B) == 0 {
		return atA(&b.d.frac, bIn)
	}
	alts := []*Expr{atA(nil, false)}
	if prev := new(big.Int).Sub(B, big.NewInt(1)); next.Cmp(prev) <= 0 {
		alts = append(alts, Seq(natRange(next, prev), anyFrac()))
	}
	return Alt(append(alts, Seq(Lit(B.String()), fracSuffix(between("", true, &b.d.frac, bIn))))...)
}

// anyFrac is an optional fraction: "." and digits.
func anyFrac() *Expr { return Opt(Seq(Lit("."), Plus(digit()))) }

// fracSuffix is the fraction part of a number whose fraction digits are
// those of ne (nil: none), or absent when empty.
func fracSuffix(ne *Expr, empty bool) *Expr {
	var alts []*Expr
	if empty {
		alts = append(alts, Empty())
	}
	if ne != nil {
		alts = append(alts, Seq(Lit("."), ne))
	}
	return Alt(alts...)
}

// between is the non-empty digit strings s whose value 0.s is at least
// 0.lo (more than, when !loIn) and at most 0.hi (less than, when !hiIn; hi
// nil: no bound), and whether the empty string (value 0) is. lo and hi
// have no trailing zeros. nil: no non-empty string.
func between(lo string, loIn bool, hi *string, hiIn bool) (*Expr, bool) {
	empty := lo == "" && loIn && (hi == nil || *hi != "" || hiIn)
	switch {
	case hi == nil && lo == "" && loIn:
		return Plus(digit()), empty
	case hi == nil && lo == "":
		return Seq(Star(digit()), Runes('1', '9'), Star(digit())), empty
	case hi != nil && *hi == "":
		if lo == "" && loIn && hiIn {
			return Plus(Lit("0")), empty
		}
		return nil, empty
	}
	l0, loRest := head(lo)
	h0, hiRest := rune('9'+1), (*string)(nil)
	if hi != nil {
		r := (*hi)[1:]
		h0, hiRest = rune((*hi)[0]), &r
	}
	var alts []*Expr
	if hi != nil && l0 == h0 {
		alts = withDigit(alts, l0, full(between(loRest, loIn, hiRest, hiIn)))
		return altOrNil(alts), empty
	}
	alts = withDigit(alts, l0, full(between(loRest, loIn, nil, false)))
	if l0+1 <= h0-1 {
		alts = append(alts, Seq(Runes(l0+1, h0-1), Star(digit())))
	}
	if hi != nil {
		alts = withDigit(alts, h0, full(between("", true, hiRest, hiIn)))
	}
	return altOrNil(alts), empty
}

// head is the first digit of s ('0' when empty) and the rest.
func head(s string) (rune, string) {
	if s == "" {
		return '0', ""
	}
	return rune(s[0]), s[1:]
}

// full is between's result as one expression (nil: nothing).
func full(ne *Expr, empty bool) *Expr {
	switch {
	case ne == nil && !empty:
		return nil
	case ne == nil:
		return Empty()
	case empty:
		return Opt(ne)
	}
	return ne
}

func withDigit(alts []*Expr, d rune, rest *Expr) []*Expr {
	if rest == nil {
		return alts
	}
	return append(alts, Seq(Lit(string(d)), rest))
}

func altOrNil(alts []*Expr) *Expr {
	if len(alts) == 0 {
		return nil
	}
	return Alt(alts...)
}
