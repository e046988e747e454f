package grammar

import (
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	tiktokenloader "github.com/pkoukk/tiktoken-go-loader"
)

// jsonStringPattern is a JSON string: unescaped characters other than the
// quote, the backslash and controls, or an escape.
const jsonStringPattern = `"(?:[^"\\\x00-\x1f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*"`

// randomVocab makes n pieces drawn to exercise the trie and the UTF-8
// lowering: ASCII, JSON punctuation, whole and partial multi-byte
// characters, duplicates, empty pieces and a few special tokens.
func randomVocab(r *rand.Rand, n int) ([][]byte, []bool) {
	frags := []string{"a", "b", "x", "0", "9", "F", "\"", "\\", "u", "n", " ", "{", "}", "[", "]", ",", ":",
		"(", ")", "é", "\xc3", "\xa9", "€", "\xe2\x82", "\U0001F600", "\xf0\x9f", "\x00", "\x1f", "\xff"}
	pieces, special := make([][]byte, n), make([]bool, n)
	for i := range pieces {
		switch {
		case i < 256:
			pieces[i] = []byte{byte(i)}
		case r.IntN(50) == 0:
			special[i] = true
			pieces[i] = []byte("<|special|>")
		case r.IntN(50) == 0: // empty
		case r.IntN(20) == 0:
			pieces[i] = pieces[r.IntN(i)] // a duplicate
		default:
			for range 1 + r.IntN(6) {
				pieces[i] = append(pieces[i], frags[r.IntN(len(frags))]...)
			}
		}
	}
	return pieces, special
}

// checkMask fails unless mask has exactly the tokens whose pieces the
// matcher accepts (special and empty ones never).
func checkMask(t *testing.T, name string, m *Matcher, mask []uint64) {
	t.Helper()
	v := m.t.v
	if len(mask) != (v.Size()+63)/64 {
		t.Fatalf("%s: mask has %d words for %d tokens", name, len(mask), v.Size())
	}
	for id := range int32(v.Size()) {
		got := mask[id/64]&(1<<(id%64)) != 0
		want := v.eligible(id) && m.Clone().AcceptBytes(v.Piece(id)) == nil
		if got != want {
			t.Fatalf("%s: token %d %q: in mask %v, accepted %v", name, id, v.Piece(id), got, want)
		}
		if got != (m.Clone().Accept(id) == nil) {
			t.Fatalf("%s: token %d %q: in mask %v but Accept disagrees", name, id, v.Piece(id), got)
		}
	}
}

// walkMasks follows random allowed tokens from the start, checking every
// mask on the way (and that the cached mask is the same).
func walkMasks(t *testing.T, r *rand.Rand, name string, tok *Tokens, steps int) int {
	m := tok.Start()
	checked := 0
	for range steps {
		mask := m.Allowed()
		checkMask(t, name, m, mask)
		if again := m.Allowed(); !slices.Equal(again, mask) {
			t.Fatalf("%s: a second Allowed differs", name)
		}
		checked++
		var allowed []int32
		for id := range int32(tok.v.Size()) {
			if mask[id/64]&(1<<(id%64)) != 0 {
				allowed = append(allowed, id)
			}
		}
		if len(allowed) == 0 {
			break
		}
		if err := m.Accept(allowed[r.IntN(len(allowed))]); err != nil {
			t.Fatalf("%s: accepting an allowed token: %v", name, err)
		}
	}
	return checked
}

// TestMaskMatchesAccept checks, on a random 3,000-token vocabulary and
// grammars of strings, nesting and Unicode, along random walks of allowed
// tokens, that a token's bit is set iff its whole piece is accepted from
// that state (and never for special or empty tokens), with the mask cache
// on and off.
func TestMaskMatchesAccept(t *testing.T) {
	r := rand.New(rand.NewPCG(38, 3))
	pieces, special := randomVocab(r, 3000)
	v := NewVocab(pieces, special)
	grammars := map[string]*Grammar{
		"json string": regexpGrammar(t, jsonStringPattern),
		"unicode":     regexpGrammar(t, `(?:é|€x|\x{1F600}+|[^"]{2,3})*"`),
		"parens":      parens(),
	}
	checked := 0
	for name, g := range grammars {
		a, err := Compile(g, Limits{})
		if err != nil {
			t.Fatal(err)
		}
		for _, cache := range []int{0, 1 << 20} {
			for range 5 {
				checked += walkMasks(t, r, name, NewTokens(a, v, cache), 12)
			}
		}
	}
	if checked < 100 {
		t.Fatalf("only %d masks checked", checked)
	}
}

// parens is balanced parentheses around x: s ::= "x" | "(" s* ")".
func parens() *Grammar {
	var b Builder
	s := b.Rule("s")
	b.Define(s, Alt(Lit("x"), Seq(Lit("("), Star(Ref(s)), Lit(")"))))
	g, err := b.Grammar()
	if err != nil {
		panic(err)
	}
	return g
}

// loadCl100k loads the tiktoken cl100k_base vocabulary once (embedded,
// no network): 100,277 ids, specials marked, the ids no token has empty.
var loadCl100k = sync.OnceValues(func() (*Vocab, error) {
	ranks, err := tiktokenloader.NewOfflineLoader().LoadTiktokenBpe("https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken")
	if err != nil {
		return nil, err
	}
	pieces, special := make([][]byte, 100277), make([]bool, 100277)
	for tok, id := range ranks {
		pieces[id] = []byte(tok)
	}
	for _, id := range []int{100257, 100258, 100259, 100260, 100276} {
		pieces[id], special[id] = []byte("<|special|>"), true
	}
	return NewVocab(pieces, special), nil
})

func cl100k(t testing.TB) *Vocab {
	t.Helper()
	v, err := loadCl100k()
	if err != nil {
		t.Fatalf("cl100k_base: %v", err)
	}
	return v
}

// TestMaskCl100k checks masks of a JSON string grammar over the whole
// cl100k_base vocabulary, token by token, at the start, inside the string
// and mid-escape.
func TestMaskCl100k(t *testing.T) {
	if testing.Short() {
		t.Skip("loads a 100k vocabulary")
	}
	tok := mustTokens(t, regexpGrammar(t, jsonStringPattern), cl100k(t))
	m := tok.Start()
	for _, prefix := range []string{"", `"`, `"ab`, `"\u00`, `"\`} {
		c := m.Clone()
		if err := c.AcceptBytes([]byte(prefix)); err != nil {
			t.Fatal(err)
		}
		checkMask(t, prefix, c, c.Allowed())
	}
}

// BenchmarkMask measures Allowed over cl100k_base (100,277 tokens) inside
// a JSON string: "cold" on fresh tables (transitions computed too),
// "uncached" with the transitions memoized but no mask cache, "cached"
// from the mask cache.
func BenchmarkMask(b *testing.B) {
	v := cl100k(b)
	a, err := Compile(regexpGrammar(b, jsonStringPattern), Limits{})
	if err != nil {
		b.Fatal(err)
	}
	inString := func(tok *Tokens) *Matcher {
		m := tok.Start()
		if err := m.AcceptBytes([]byte(`"`)); err != nil {
			b.Fatal(err)
		}
		return m
	}
	b.Run("cold", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			m := inString(NewTokens(a, v, 1<<20))
			b.StartTimer()
			m.Allowed()
		}
	})
	b.Run("uncached", func(b *testing.B) {
		m := inString(NewTokens(a, v, 0))
		m.Allowed()
		for b.Loop() {
			m.Allowed()
		}
	})
	b.Run("cached", func(b *testing.B) {
		m := inString(NewTokens(a, v, 1<<20))
		m.Allowed()
		for b.Loop() {
			m.Allowed()
		}
	})
	// A JSON value in GBNF (llama.cpp's json.gbnf, whitespace included),
	// uncached, where an object's member value starts.
	g, err := ParseGBNF(jsonGBNF)
	if err != nil {
		b.Fatal(err)
	}
	ja, err := Compile(g, Limits{})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("json-value-uncached", func(b *testing.B) {
		m := NewTokens(ja, v, 0).Start()
		if err := m.AcceptBytes([]byte(`{"a": [1, {"b": `)); err != nil {
			b.Fatal(err)
		}
		m.Allowed()
		for b.Loop() {
			m.Allowed()
		}
	})
}

// jsonGBNF is llama.cpp's grammars/json.gbnf.
const jsonGBNF = `root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws

object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws

array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]" ws

string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) # escapes
  )* "\"" ws

number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws

# Optional space: by convention, applied in this grammar after literal chars when allowed
ws ::= | " " | "\n" [ \t]{0,20}
`
