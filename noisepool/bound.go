package noisepool

import (
	"fmt"
	"math"
)

// A bound row holds, for every token, an upper bound on its Gumbel value
// instead of the value: BoundFromBits(Bits(seed, i)). The bound is the
// Gumbel value at the top of the token's 1/4096 slice of the generator's
// ordered inputs, read from a table, so a producer fills a bound row with
// one hash per two tokens and a table load per token (no logs), about 10×
// less work than an exact row on the portable kernel. A sampler compares
// logit/T + bound with its best score so far and computes the exact value
// (GumbelFromBits) only for the few tokens whose bound can still win; the
// chosen token is the same as with exact values.

// BoundBits is the number of top bits of the ordered input that select a
// bound's table entry.
const BoundBits = 12

const (
	boundShift = 32 - BoundBits
	boundSize  = 1 << BoundBits
)

var (
	// boundFlip maps raw bits to the input order: key = bits ^ boundFlip
	// is non-decreasing in GumbelFromBits(bits).
	boundFlip uint32
	// boundTab[j] is GumbelFromBits at key j<<boundShift, and
	// boundTab[boundSize] is MaxGumbel.
	boundTab [boundSize + 1]float32
)

func init() {
	if GumbelFromBits(math.MaxUint32) < GumbelFromBits(0) {
		boundFlip = math.MaxUint32
	}
	for j := range boundSize {
		boundTab[j] = GumbelFromBits(uint32(j)<<boundShift ^ boundFlip)
	}
	boundTab[boundSize] = max(GumbelFromBits(0), GumbelFromBits(math.MaxUint32))
}

// BoundFromBits returns an upper bound on GumbelFromBits(b): the exact
// value at the top of b's table interval. It is non-decreasing in the
// same order as GumbelFromBits, so float32(x + BoundFromBits(b)) >=
// float32(x + GumbelFromBits(b)) for every x.
func BoundFromBits(b uint32) float32 { return boundTab[(b^boundFlip)>>boundShift+1] }

// FillBoundRow sets dst[i] = BoundFromBits(Bits(RowSeed(key, row), i)).
func FillBoundRow(key, row uint64, dst []float32) { fillBoundRow(RowSeed(key, row), 0, dst) }

// fillBoundRow is FillBoundRow from index first (even) of the row with
// seed seed.
func fillBoundRow(seed uint64, first int, dst []float32) {
	ctr := seed + uint64(first>>1)*golden
	tab, flip := &boundTab, boundFlip
	for len(dst) >= 2 {
		h := mix64(ctr)
		ctr += golden
		dst[0] = tab[(uint32(h)^flip)>>boundShift+1]
		dst[1] = tab[(uint32(h>>32)^flip)>>boundShift+1]
		dst = dst[2:]
	}
	if len(dst) == 1 {
		dst[0] = tab[(uint32(mix64(ctr))^flip)>>boundShift+1]
	}
}

// Form is what a pool row holds.
type Form uint8

// Row forms. FormAuto picks per machine (see DefaultForm).
const (
	FormAuto  Form = iota
	FormExact      // Values[i] == Gumbel(key, row, i)
	FormBound      // Values[i] == BoundFromBits(Bits(RowSeed(key, row), i)) >= Gumbel(key, row, i)
)

func (f Form) String() string {
	switch f {
	case FormAuto:
		return "auto"
	case FormExact:
		return "exact"
	case FormBound:
		return "bound"
	}
	return fmt.Sprintf("Form(%d)", uint8(f))
}

// Set parses s as ParseForm does (flag.Value).
func (f *Form) Set(s string) error {
	v, err := ParseForm(s)
	if err == nil {
		*f = v
	}
	return err
}

// Type names the flag type (pflag.Value).
func (f *Form) Type() string { return "form" }

// ParseForm accepts auto, exact and bound.
func ParseForm(s string) (Form, error) {
	for f := FormAuto; f <= FormBound; f++ {
		if f.String() == s {
			return f, nil
		}
	}
	return 0, fmt.Errorf("unknown noise row form %q (want auto, exact or bound)", s)
}

// DefaultForm is the form FormAuto resolves to: exact rows where FillRow
// has a vector kernel (amd64 with AVX-512: 0.4 ns a value, less than a
// bound row's scalar table loads), bound rows elsewhere (the portable
// kernel's two logs cost about 9 ns a value; a bound about 1 ns).
func DefaultForm() Form {
	if useAVX512 {
		return FormExact
	}
	return FormBound
}

// fillForm fills dst from index first (even) of the row with seed seed in
// form f (exact or bound).
func fillForm(f Form, seed uint64, first int, dst []float32) {
	if f == FormBound {
		fillBoundRow(seed, first, dst)
		return
	}
	fillRow(seed, first, dst)
}
