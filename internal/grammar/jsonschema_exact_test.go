package grammar

import (
	"errors"
	"fmt"
	"math/big"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
	"time"
)

// boundsCase is a set of bounds in schema text ("" for absent).
type boundsCase struct{ min, exMin, max, exMax string }

func (b boundsCase) schema(typ string) string {
	parts := []string{`"type":"` + typ + `"`}
	for k, v := range map[string]string{"minimum": b.min, "exclusiveMinimum": b.exMin, "maximum": b.max, "exclusiveMaximum": b.exMax} {
		if v != "" {
			parts = append(parts, fmt.Sprintf("%q:%s", k, v))
		}
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// holds reports whether the value x (exact) is within the bounds.
func (b boundsCase) holds(x *big.Rat) bool {
	check := func(bound string, ok func(c int) bool) bool {
		if bound == "" {
			return true
		}
		r, _ := new(big.Rat).SetString(bound)
		return ok(x.Cmp(r))
	}
	return check(b.min, func(c int) bool { return c >= 0 }) && check(b.exMin, func(c int) bool { return c > 0 }) &&
		check(b.max, func(c int) bool { return c <= 0 }) && check(b.exMax, func(c int) bool { return c < 0 })
}

// randomBounds draws bounds with up to two fraction digits in [-scale,
// scale], each present or not.
func randomBounds(rng *rand.Rand, scale int, fraction bool) boundsCase {
	num := func() string {
		if rng.IntN(3) == 0 {
			return ""
		}
		v := rng.IntN(2*scale+1) - scale
		if fraction && rng.IntN(2) == 0 {
			return fmt.Sprintf("%d.%02d", v, rng.IntN(100))
		}
		return fmt.Sprint(v)
	}
	return boundsCase{num(), num(), num(), num()}
}

// TestIntegerBoundsExact checks that an integer schema's grammar accepts
// exactly the integers within its bounds: for 80 random bound sets
// (fractional, exclusive, negative, zero, absent) every integer in
// [-130, 130] is tried, and for bounds around 2^64 and ±10^30 every
// integer within 300 of each bound; non-canonical forms (-0, 007, 1.0)
// are never accepted.
func TestIntegerBoundsExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(38, 1))
	var cases []boundsCase
	for range 80 {
		cases = append(cases, randomBounds(rng, 120, true))
	}
	cases = append(cases,
		boundsCase{min: "18446744073709551615", exMax: "18446744073709552000"},
		boundsCase{exMin: "-1e30", max: "1000000000000000000000000000000"},
		boundsCase{min: "-1e30", exMax: "-999999999999999999999999999999.5"},
		boundsCase{min: "0", max: "0"}, boundsCase{exMin: "0", exMax: "1"}, boundsCase{exMin: "-0.5", exMax: "0.5"})
	for _, bc := range cases {
		g, err := FromJSONSchema([]byte(bc.schema("integer")))
		if err != nil {
			var se *SchemaError
			if asSchemaError(err, &se) && se.Msg == "no JSON value satisfies the schema" && !anyIntHolds(bc) {
				continue
			}
			t.Fatalf("%s: %v", bc.schema("integer"), err)
		}
		for _, x := range intCandidates(bc) {
			want := bc.holds(new(big.Rat).SetInt(x))
			if got := recognizes(g, x.String()); got != want {
				t.Fatalf("%s: %s accepted=%v, want %v", bc.schema("integer"), x, got, want)
			}
		}
		for _, odd := range []string{"-0", "00", "007", "1.0", "1e2", "+1", "--1", ""} {
			if recognizes(g, odd) {
				t.Fatalf("%s: accepted %q", bc.schema("integer"), odd)
			}
		}
	}
}

// intCandidates are [-130, 130] and the integers within 300 of each bound.
func intCandidates(bc boundsCase) []*big.Int {
	var out []*big.Int
	for v := -130; v <= 130; v++ {
		out = append(out, big.NewInt(int64(v)))
	}
	for _, b := range []string{bc.min, bc.exMin, bc.max, bc.exMax} {
		if r, ok := new(big.Rat).SetString(b); ok && b != "" {
			c := floor(r)
			for d := -300; d <= 300; d++ {
				out = append(out, new(big.Int).Add(c, big.NewInt(int64(d))))
			}
		}
	}
	return out
}

func anyIntHolds(bc boundsCase) bool {
	for _, x := range intCandidates(bc) {
		if bc.holds(new(big.Rat).SetInt(x)) {
			return true
		}
	}
	return false
}

// TestNumberBoundsExact checks that a bounded number schema's grammar
// accepts exactly the decimals within its bounds: for 60 random bound
// sets, every multiple of 0.01 in [-12, 12] written canonically, each
// bound and each bound ± 0.001 and ± 0.0001, and written with trailing
// zeros; and that it accepts nothing out of bounds and no exponent or -0.
func TestNumberBoundsExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(38, 2))
	var cases []boundsCase
	for range 60 {
		cases = append(cases, randomBounds(rng, 10, true))
	}
	cases = append(cases, boundsCase{exMin: "0", exMax: "0.001"}, boundsCase{min: "-0.0001", max: "0"},
		boundsCase{exMin: "1e30"}, boundsCase{max: "-1.25e-3"}, boundsCase{min: "0.999", exMax: "1.001"})
	for _, bc := range cases {
		g, err := FromJSONSchema([]byte(bc.schema("number")))
		if err != nil {
			var se *SchemaError
			if asSchemaError(err, &se) && se.Msg == "no JSON value satisfies the schema" {
				continue // checked by the candidates below all being out of range
			}
			t.Fatalf("%s: %v", bc.schema("number"), err)
		}
		for _, x := range numCandidates(bc) {
			want := bc.holds(x)
			text := canonical(x)
			if got := recognizes(g, text); got != want {
				t.Fatalf("%s: %s accepted=%v, want %v", bc.schema("number"), text, got, want)
			}
			padded := text + "00" // the same value with trailing zeros
			if !strings.Contains(text, ".") {
				padded = text + ".00"
			}
			if got := recognizes(g, padded); got != want {
				t.Fatalf("%s: %s accepted=%v, want %v", bc.schema("number"), padded, got, want)
			}
		}
		for _, odd := range []string{"-0", "-0.0", "1e0", "1E-1", ".5", "1.", "01"} {
			if recognizes(g, odd) {
				t.Fatalf("%s: accepted %q", bc.schema("number"), odd)
			}
		}
	}
}

func numCandidates(bc boundsCase) []*big.Rat {
	var out []*big.Rat
	for v := -1200; v <= 1200; v++ {
		out = append(out, big.NewRat(int64(v), 100))
	}
	for _, b := range []string{bc.min, bc.exMin, bc.max, bc.exMax} {
		r, ok := new(big.Rat).SetString(b)
		if !ok || b == "" {
			continue
		}
		for _, d := range []int64{0, 1, -1, 10, -10} {
			out = append(out, new(big.Rat).Add(r, big.NewRat(d, 10000)))
		}
	}
	return out
}

// canonical writes x as a decimal without exponent or trailing zeros.
func canonical(x *big.Rat) string {
	s := x.FloatString(40)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	if s == "-0" {
		s = "0"
	}
	return s
}

func asSchemaError(err error, se **SchemaError) bool { return errors.As(err, se) }

// TestStringLengthCountsCharacters checks minLength 2 / maxLength 4 by
// characters: an escape (\n, \u00e9, \") and a multi-byte character each
// count as one; lone surrogate escapes and raw control characters are
// refused.
func TestStringLengthCountsCharacters(t *testing.T) {
	g, err := FromJSONSchema([]byte(`{"type":"string","minLength":2,"maxLength":4}`))
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]bool{
		`"ab"`: true, `"a"`: false, `""`: false, `"abcd"`: true, `"abcde"`: false,
		`"\n\u00e9"`: true, `"é€𝄞"`: true, `"\"\\\/\b"`: true, `"\u00e9\u00e9\u00e9\u00e9\u00e9"`: false,
		`"\ud800a"`: false, `"\uDFFFa"`: false, "\"a\x01\"": false, `"a\x"`: false, `"\uD7FFa"`: true,
	}
	for s, want := range cases {
		if got := recognizes(g, s); got != want {
			t.Errorf("%s: accepted=%v, want %v", s, got, want)
		}
	}
}

// TestPatternExact compares each pattern's grammar with Go's regexp
// (whole match) on 3000 random strings over an alphabet with the
// characters JSON must escape: the JSON text of a string (quoteJSON) is
// accepted exactly when the string matches, and no string that does not
// match is accepted in an alternative escape form (\/, \u000a).
func TestPatternExact(t *testing.T) {
	patterns := []string{`^[a-c"\\]{1,3}$`, `a|b\n|/`, `^\d+(x|")?$`, `[^a]*`, `(ab|a)*b?`, `[\x00-\x1f]+`, `^\u00e9+$`}
	alphabet := []rune{'a', 'b', 'c', 'x', '"', '\\', '/', '\n', '\x01', '\x1f', '0', '7', 'é'}
	rng := rand.New(rand.NewPCG(38, 3))
	for _, p := range patterns {
		g, err := FromJSONSchema([]byte(`{"type":"string","pattern":` + quoteJSON(p) + `}`))
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		re := regexp.MustCompile(`^(?:` + strings.ReplaceAll(p, `\u00e9`, `\x{e9}`) + `)$`)
		for range 3000 {
			rs := make([]rune, rng.IntN(5))
			for i := range rs {
				rs[i] = alphabet[rng.IntN(len(alphabet))]
			}
			s := string(rs)
			want := re.MatchString(s)
			if got := recognizes(g, quoteJSON(s)); got != want {
				t.Fatalf("pattern %q, string %q: accepted=%v, want %v", p, s, got, want)
			}
			alt := strings.NewReplacer("/", `\/`, "\n", `\u000A`).Replace(quoteJSON(s))
			if recognizes(g, alt) != want {
				t.Fatalf("pattern %q, text %s: accepted=%v, want %v", p, alt, !want, want)
			}
		}
	}
}

// TestPatternDotIsECMA checks that `.` in a pattern matches no line
// terminator of ECMA-262 (\n, \r, U+2028, U+2029) but any other character.
func TestPatternDotIsECMA(t *testing.T) {
	g, err := FromJSONSchema([]byte(`{"type":"string","pattern":"^a.b$"}`))
	if err != nil {
		t.Fatal(err)
	}
	for s, want := range map[string]bool{"axb": true, "a\tb": true, "a\u2027b": true, "a\U0001F600b": true, "a\nb": false, "a\rb": false, "a\u2028b": false, "a\u2029b": false} {
		if got := recognizes(g, quoteJSON(s)); got != want {
			t.Errorf("%q: accepted=%v, want %v", s, got, want)
		}
	}
}

// TestDateFormatExact checks format date against Go's time.Parse (the
// oracle's own check) for every YYYY-MM-DD with month 00..13 and day
// 00..32 in ten years, leap years and century years included.
func TestDateFormatExact(t *testing.T) {
	g, err := FromJSONSchema([]byte(`{"type":"string","format":"date"}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, y := range []int{0, 4, 100, 1900, 1999, 2000, 2023, 2024, 2100, 2400} {
		for m := 0; m <= 13; m++ {
			for d := 0; d <= 32; d++ {
				s := fmt.Sprintf("%04d-%02d-%02d", y, m, d)
				_, perr := time.Parse("2006-01-02", s)
				if got, want := recognizes(g, `"`+s+`"`), perr == nil; got != want {
					t.Fatalf("%s: accepted=%v, want %v", s, got, want)
				}
			}
		}
	}
}

// TestFormatSamples checks time, date-time, uuid and ipv4 on chosen
// strings, each accepted or refused as the oracle's checks would (within
// the documented subset: T, Z, seconds 00..59).
func TestFormatSamples(t *testing.T) {
	cases := map[string]map[string]bool{
		"time": {"23:59:59Z": true, "00:00:00.123456789+23:59": true, "24:00:00Z": false, "12:60:00Z": false,
			"12:00:00": false, "12:00:00.Z": false, "12:00:00+24:00": false, "12:00:00.1234567890Z": false},
		"date-time": {"2024-02-29T12:00:00Z": true, "2023-02-29T12:00:00Z": false, "2024-01-01 12:00:00Z": false},
		"uuid":      {"123e4567-e89b-12d3-a456-426614174000": true, "123E4567-E89B-12D3-A456-42661417400A": true, "123e4567e89b12d3a456426614174000": false, "123e4567-e89b-12d3-a456-42661417400g": false},
		"ipv4":      {"0.0.0.0": true, "255.255.255.255": true, "192.168.1.10": true, "256.1.1.1": false, "01.1.1.1": false, "1.1.1": false, "1.1.1.1.": false},
	}
	for f, samples := range cases {
		g, err := FromJSONSchema([]byte(`{"type":"string","format":"` + f + `"}`))
		if err != nil {
			t.Fatal(err)
		}
		for s, want := range samples {
			if got := recognizes(g, `"`+s+`"`); got != want {
				t.Errorf("%s %q: accepted=%v, want %v", f, s, got, want)
			}
		}
	}
}

// TestArrayCountsExact checks prefixItems, items and minItems/maxItems by
// recognition: exactly the arrays of 2 to 4 elements, a boolean then
// nulls.
func TestArrayCountsExact(t *testing.T) {
	g, err := FromJSONSchema([]byte(`{"type":"array","prefixItems":[{"type":"boolean"}],"items":{"type":"null"},"minItems":2,"maxItems":4}`))
	if err != nil {
		t.Fatal(err)
	}
	for s, want := range map[string]bool{`[]`: false, `[true]`: false, `[true,null]`: true, `[false,null,null,null]`: true,
		`[true,null,null,null,null]`: false, `[null,null]`: false, `[true,true]`: false} {
		if got := recognizes(g, s); got != want {
			t.Errorf("%s: accepted=%v, want %v", s, got, want)
		}
	}
}
