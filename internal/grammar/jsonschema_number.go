package grammar

import (
	"fmt"
	"math/big"
	"strconv"
	"strings"
)

// dec is a JSON number literal as digits × 10^exp.
type dec struct {
	neg    bool
	digits string // no leading or trailing zeros; "" is zero
	exp    int
}

// splitDecimal reads a JSON number literal.
func splitDecimal(lit string) (dec, error) {
	var d dec
	s, neg := strings.CutPrefix(lit, "-")
	mant, expText, hasExp := strings.Cut(strings.ToLower(s), "e")
	exp := 0
	if hasExp {
		e, err := strconv.Atoi(strings.TrimPrefix(expText, "+"))
		if err != nil || e > 1<<20 || e < -(1<<20) {
			return d, fmt.Errorf("number %s: exponent out of range", lit)
		}
		exp = e
	}
	ip, fp, _ := strings.Cut(mant, ".")
	d.digits = strings.TrimLeft(ip+fp, "0")
	d.exp = exp - len(fp)
	for n := len(d.digits); n > 0 && d.digits[n-1] == '0'; n-- {
		d.digits = d.digits[:n-1]
		d.exp++
	}
	if d.digits == "" {
		return dec{}, nil
	}
	d.neg = neg
	return d, nil
}

// width is the number of decimal digits of d written without exponent
// (integer part and fraction).
func (d dec) width() int {
	if d.exp >= 0 {
		return len(d.digits) + d.exp
	}
	return max(len(d.digits), -d.exp)
}

// value is d as an int; only for integers of a few digits.
func (d dec) value() int {
	v, _ := strconv.Atoi(d.digits + strings.Repeat("0", d.exp))
	return v
}

// decimal is a finite decimal number split for the digit constructions.
type decimal struct {
	neg  bool
	ip   *big.Int // integer part of the magnitude
	frac string   // fraction digits of the magnitude, no trailing zeros
}

func (d dec) decimal() decimal {
	x := decimal{neg: d.neg, ip: new(big.Int)}
	digits := d.digits
	switch p := len(digits) + d.exp; {
	case d.exp >= 0:
		digits += strings.Repeat("0", d.exp)
	case p > 0:
		digits, x.frac = digits[:p], digits[p:]
	default:
		digits, x.frac = "0", strings.Repeat("0", -p)+digits
	}
	x.ip.SetString(digits, 10)
	return x
}

func (x decimal) rat() *big.Rat {
	r, _ := new(big.Rat).SetString(x.ip.String() + "." + x.frac + "0")
	if x.neg {
		r.Neg(r)
	}
	return r
}

func (x decimal) abs() decimal { x.neg = false; return x }

// limit is a lower or upper bound.
type limit struct {
	d    decimal
	excl bool
}

// bounds reads minimum, exclusiveMinimum, maximum and exclusiveMaximum,
// keeping the tighter bound on each side (nil: none).
func bounds(n *node, ptr string) (lo, hi *limit, err error) {
	for _, k := range []string{"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"} {
		v := n.get(k)
		if v == nil {
			continue
		}
		if v.kind != kNumber {
			return nil, nil, errAt(ptr, k, "must be a number (the boolean form of draft 4 is not supported)")
		}
		d, err := splitDecimal(v.str)
		if err == nil && d.width() > MaxBoundDigits {
			err = fmt.Errorf("schema too large: %d digits, at most %d", d.width(), MaxBoundDigits)
		}
		if err != nil {
			return nil, nil, errAt(ptr, k, "%v", err)
		}
		l := &limit{d: d.decimal(), excl: strings.HasPrefix(k, "exclusive")}
		if strings.HasSuffix(k, "inimum") {
			lo = tighter(lo, l, 1)
		} else {
			hi = tighter(hi, l, -1)
		}
	}
	return lo, hi, nil
}

// tighter returns the tighter of two lower (dir 1) or upper (dir -1) bounds.
func tighter(old, l *limit, dir int) *limit {
	if old == nil {
		return l
	}
	switch c := l.d.rat().Cmp(old.d.rat()) * dir; {
	case c > 0:
		return l
	case c == 0:
		return &limit{d: l.d, excl: l.excl || old.excl}
	}
	return old
}

// integer compiles an integer schema: the integers within the bounds, in
// canonical form (no leading zeros, no -0, no fraction or exponent).
func (c *compiler) integer(n *node, ptr string) (*Expr, error) {
	lo, hi, err := bounds(n, ptr)
	if err != nil {
		return nil, err
	}
	var loI, hiI *big.Int
	if lo != nil {
		if loI = ceil(lo.d.rat()); lo.excl && lo.d.rat().IsInt() {
			loI.Add(loI, big.NewInt(1))
		}
	}
	if hi != nil {
		if hiI = floor(hi.d.rat()); hi.excl && hi.d.rat().IsInt() {
			hiI.Sub(hiI, big.NewInt(1))
		}
	}
	return intRange(loI, hiI), nil
}

func floor(r *big.Rat) *big.Int { return new(big.Int).Div(r.Num(), r.Denom()) } // Euclidean: floor for a positive divisor

func ceil(r *big.Rat) *big.Int {
	f := floor(new(big.Rat).Neg(r))
	return f.Neg(f)
}

// number compiles a number schema: any JSON number without bounds; with
// bounds, the decimals (no exponent, no -0) within them.
func (c *compiler) number(n *node, ptr string) (*Expr, error) {
	lo, hi, err := bounds(n, ptr)
	if err != nil {
		return nil, err
	}
	if lo == nil && hi == nil {
		return jsonNumber(), nil
	}
	return numRange(lo, hi), nil
}
