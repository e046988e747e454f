package grammar

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"testing"
	"unicode/utf8"
)

// byteVocab has one token per byte value: token b is the byte b.
func byteVocab() *Vocab {
	pieces := make([][]byte, 256)
	for b := range pieces {
		pieces[b] = []byte{byte(b)}
	}
	return NewVocab(pieces, nil)
}

func mustTokens(t testing.TB, g *Grammar, v *Vocab) *Tokens {
	t.Helper()
	a, err := Compile(g, Limits{})
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	return NewTokens(a, v, 1<<20)
}

func regexpGrammar(t testing.TB, pattern string) *Grammar {
	t.Helper()
	e, err := FromRegexp(pattern)
	if err != nil {
		t.Fatalf("FromRegexp(%q): %v", pattern, err)
	}
	return Single("root", e)
}

// matches reports whether the whole of s is a sentence: every byte
// accepted and CanEnd after.
func matches(m *Matcher, s string) bool {
	m = m.Clone()
	return m.AcceptBytes([]byte(s)) == nil && m.CanEnd()
}

// randomRegexp builds a random pattern over a few characters (one and
// multi-byte) with every operator FromRegexp supports.
func randomRegexp(r *rand.Rand, depth int) string {
	atoms := []string{"a", "b", "é", "\\n", "\U00010000", ".", "(?s:.)", "[ab]", "[^a]", "[a-é]",
		"[^\\x00-\\x7f]", "(?i:A)", "\\pL", "[\\x{10000}-\\x{10FFFF}]", "(?:)", "[^\\x00-\\x{10FFFF}]"}
	if depth <= 0 || r.IntN(3) == 0 {
		return atoms[r.IntN(len(atoms))]
	}
	sub := func() string { return randomRegexp(r, depth-1) }
	switch r.IntN(9) {
	case 0, 1:
		return sub() + sub()
	case 2:
		return "(?:" + sub() + "|" + sub() + ")"
	case 3:
		return "(?:" + sub() + ")*"
	case 4:
		return "(?:" + sub() + ")+"
	case 5:
		return "(?:" + sub() + ")?"
	case 6:
		lo := r.IntN(3)
		return fmt.Sprintf("(?:%s){%d,%d}", sub(), lo, lo+r.IntN(3))
	case 7:
		return fmt.Sprintf("(?:%s){%d,}", sub(), r.IntN(3))
	}
	return "(" + sub() + sub() + ")"
}

// allStrings returns every string of at most n characters over alphabet.
func allStrings(alphabet []string, n int) []string {
	out := []string{""}
	level := []string{""}
	for range n {
		var next []string
		for _, p := range level {
			for _, c := range alphabet {
				next = append(next, p+c)
			}
		}
		out = append(out, next...)
		level = next
	}
	return out
}

// TestMatchesRegexp compares the matcher with Go's regexp on 300 random
// patterns (fixed seed) and every string of up to 4 characters over an
// alphabet of one-, two- and four-byte characters and a newline: the
// whole string is accepted and CanEnd iff regexp matches it whole.
func TestMatchesRegexp(t *testing.T) {
	r := rand.New(rand.NewPCG(38, 1))
	strs := allStrings([]string{"a", "b", "é", "\n", "\U00010000", "A"}, 4)
	v := byteVocab()
	positives := 0
	for range 300 {
		pat := randomRegexp(r, 4)
		re := regexp.MustCompile(`^(?:` + pat + `)$`)
		tok := mustTokens(t, regexpGrammar(t, pat), v)
		start := tok.Start()
		for _, s := range strs {
			if got, want := matches(start, s), re.MatchString(s); got != want {
				t.Fatalf("pattern %q, string %q: matcher %v, regexp %v", pat, s, got, want)
			} else if want {
				positives++
			}
		}
	}
	// The comparison means little if hardly any string matches.
	if positives < 5000 {
		t.Fatalf("only %d of %d (pattern, string) pairs match", positives, 300*len(strs))
	}
	t.Logf("%d of %d (pattern, string) pairs match", positives, 300*len(strs))
}

// TestLiveStatesComplete checks that the dead parts of an automaton are
// removed: from every state reached by accepting bytes, the output can
// still be completed (a breadth-first search over bytes finds CanEnd), on
// patterns with parts that match nothing.
func TestLiveStatesComplete(t *testing.T) {
	v := byteVocab()
	for _, pat := range []string{`a(?:b[^\x00-\x{10FFFF}]|c)`, `(?:ab[^\x00-\x{10FFFF}])*d`, `x(?:é[^\x00-\x{10FFFF}])?`, `[^\x00-\x{10FFFF}]`} {
		tok := mustTokens(t, regexpGrammar(t, pat), v)
		seen := map[int32]bool{}
		queue := []*Matcher{tok.Start()}
		for len(queue) > 0 {
			m := queue[0]
			queue = queue[1:]
			if seen[m.set] {
				continue
			}
			seen[m.set] = true
			if !m.Dead() && !canComplete(m, 8) {
				t.Fatalf("pattern %q: a live state that cannot complete within 8 bytes", pat)
			}
			for b := range 256 {
				c := m.Clone()
				if c.AcceptBytes([]byte{byte(b)}) == nil {
					queue = append(queue, c)
				}
			}
		}
	}
	if !mustTokens(t, regexpGrammar(t, `[^\x00-\x{10FFFF}]`), v).Start().Dead() {
		t.Fatal("a grammar matching nothing starts live")
	}
}

func canComplete(m *Matcher, n int) bool {
	if m.CanEnd() {
		return true
	}
	if n == 0 {
		return false
	}
	for b := range 256 {
		c := m.Clone()
		if c.AcceptBytes([]byte{byte(b)}) == nil && canComplete(c, n-1) {
			return true
		}
	}
	return false
}

// TestUTF8Sequences checks the split of code point ranges into byte-range
// sequences: on random ranges, the sequences cover exactly as many byte
// strings as the range has code points, every rune of the range is
// matched by one, and random strings of each sequence decode to one rune
// of the range.
func TestUTF8Sequences(t *testing.T) {
	r := rand.New(rand.NewPCG(38, 2))
	for range 2000 {
		lo, hi := randomRune(r), randomRune(r)
		if lo > hi {
			lo, hi = hi, lo
		}
		var seqs [][][2]byte
		spans := normalize([]rune{lo, hi}, utf8.MaxRune, true) // surrogates out
		want := 0
		for i := 0; i < len(spans); i += 2 {
			seqs = append(seqs, utf8Sequences(spans[i], spans[i+1])...)
			want += int(spans[i+1]-spans[i]) + 1
		}
		total := 0
		for _, seq := range seqs {
			n := 1
			for _, br := range seq {
				n *= int(br[1]-br[0]) + 1
			}
			total += n
			for range 20 {
				var b []byte
				for _, br := range seq {
					b = append(b, br[0]+byte(r.IntN(int(br[1]-br[0])+1)))
				}
				c, size := utf8.DecodeRune(b)
				if size != len(b) || (c == utf8.RuneError && size == 1) || c < lo || c > hi {
					t.Fatalf("[%#x, %#x]: sequence %v matches %x, not a rune of the range", lo, hi, seq, b)
				}
			}
		}
		if total != want {
			t.Fatalf("[%#x, %#x]: sequences cover %d strings, want %d", lo, hi, total, want)
		}
		for range 20 {
			c := lo + rune(r.IntN(int(hi-lo)+1))
			if n := seqsMatching(seqs, []byte(string(c))); utf8.ValidRune(c) && n != 1 {
				t.Fatalf("[%#x, %#x]: %U is matched by %d sequences", lo, hi, c, n)
			}
		}
	}
}

// randomRune returns a code point near an encoding boundary
// or anywhere.
func randomRune(r *rand.Rand) rune {
	edges := []rune{0, 0x7F, 0x80, 0x7FF, 0x800, 0xD7FF, 0xE000, 0xFFFF, 0x10000, 0x10FFFF}
	c := rune(r.IntN(0x110000))
	if r.IntN(2) == 0 {
		c = edges[r.IntN(len(edges))] + rune(r.IntN(5)-2)
	}
	return max(0, min(c, 0x10FFFF))
}

func seqsMatching(seqs [][][2]byte, b []byte) int {
	n := 0
	for _, seq := range seqs {
		ok := len(seq) == len(b)
		for i := 0; ok && i < len(b); i++ {
			ok = seq[i][0] <= b[i] && b[i] <= seq[i][1]
		}
		if ok {
			n++
		}
	}
	return n
}
