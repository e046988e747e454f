package grammar

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
)

// TestLimitsStates checks that a grammar over MaxStates is refused, naming
// the rule and the limit, and that a huge nested repeat is refused without
// being expanded first (the test would run out of time or memory).
func TestLimitsStates(t *testing.T) {
	var b Builder
	root, word := b.Rule("root"), b.Rule("word")
	b.Define(root, Ref(word))
	b.Define(word, Repeat(Lit("abcdefgh"), 200, 200))
	g, err := b.Grammar()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Compile(g, Limits{MaxStates: 1000}); err == nil || !strings.Contains(err.Error(), `rule "word": more than 1000 automaton states (Limits.MaxStates)`) {
		t.Fatalf("1,600 states with MaxStates 1000: %v", err)
	}
	if a, err := Compile(g, Limits{MaxStates: 2000}); err != nil || a.NumStates() > 2000 {
		t.Fatalf("MaxStates 2000: %v", err)
	}
	huge := mustGBNF(t, `root ::= (("a"{100000}){100000}){100000}`)
	if _, err := Compile(huge, Limits{}); err == nil || !strings.Contains(err.Error(), "Limits.MaxStates") {
		t.Fatalf("10^15 copies: %v", err)
	}
	// Copies of "" add no state for MaxStates to count: found by
	// FuzzParseGBNF, this took forever.
	empty := mustGBNF(t, `root ::= (((""){100000}){100000}){100000} "a"`)
	if _, err := Compile(empty, Limits{}); err != nil {
		t.Fatal(err)
	}
}

// TestLimitsStacks checks that a position with more parse stacks than
// MaxStacks is an error from AcceptBytes naming the limit (and such bytes
// are left out of masks), and at the start an error from Compile.
func TestLimitsStacks(t *testing.T) {
	// After n a's, [ab]*a[ab]{20} has 2 + min(n, 20) stacks: the loop, the
	// a after it and a place in the {20}.
	a, err := Compile(regexpGrammar(t, `[ab]*a[ab]{20}`), Limits{MaxStacks: 10})
	if err != nil {
		t.Fatal(err)
	}
	tok := NewTokens(a, byteVocab(), 1<<20)
	m := tok.Start()
	allowed := func(b byte) bool { return m.Allowed()[b/64]&(1<<(b%64)) != 0 }
	if err := m.AcceptBytes([]byte("aaaaaaa")); err != nil {
		t.Fatal(err)
	}
	if !allowed('a') || !allowed('b') {
		t.Fatal("a or b is not allowed after 7 a's")
	}
	if err := m.AcceptBytes([]byte("a")); err != nil {
		t.Fatal(err)
	}
	if allowed('a') || !allowed('b') {
		t.Fatal("after 8 a's, a (11 stacks) is allowed or b (10 stacks) is not")
	}
	err = m.AcceptBytes([]byte("a"))
	if err == nil || !strings.Contains(err.Error(), "more than 10 parse stacks at once (Limits.MaxStacks)") {
		t.Fatalf("9 a's with MaxStacks 10: %v", err)
	}
	g := Single("root", Alt(Lit("a"), Runes('b', 'b'), Runes('c', 'c'), Runes('d', 'd')))
	if _, err := Compile(g, Limits{MaxStacks: 3}); err == nil || !strings.Contains(err.Error(), "at the start: more than 3 parse stacks") {
		t.Fatalf("4 stacks at the start with MaxStacks 3: %v", err)
	}
}

// TestLimitsClosure checks that a closure exploring many paths without a
// byte (rules of two optional calls, 2^20 ways to match "") is cut off by
// the bound on moves, from Compile at the start or from AcceptBytes.
func TestLimitsClosure(t *testing.T) {
	var src strings.Builder
	src.WriteString("root ::= \"x\" r0 \"y\"\n")
	for i := range 20 {
		fmt.Fprintf(&src, "r%d ::= r%d? r%d?\n", i, i+1, i+1)
	}
	src.WriteString("r20 ::= \"\"\n")
	a, err := Compile(mustGBNF(t, src.String()), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	err = NewTokens(a, byteVocab(), 0).Start().AcceptBytes([]byte("x"))
	if err == nil || !strings.Contains(err.Error(), "moves without consuming a byte") {
		t.Fatalf("2^20 paths: %v", err)
	}
	if _, err := Compile(mustGBNF(t, strings.Replace(src.String(), `"x" `, "", 1)), Limits{}); err == nil || !strings.Contains(err.Error(), "at the start: more than") {
		t.Fatalf("2^20 paths at the start: %v", err)
	}
}

// TestAltOfLiterals checks that an alternation of many literals (an enum)
// shares its prefixes, within the default MaxStacks, and matches exactly
// its strings.
func TestAltOfLiterals(t *testing.T) {
	alts := []*Expr{Lit("ab"), Lit("a"), Runes('x', 'z'), Lit("ab")}
	for i := range 5000 {
		alts = append(alts, Lit(fmt.Sprintf("w%d", i)))
	}
	tok := mustTokens(t, Single("root", Alt(alts...)), byteVocab())
	for _, s := range []string{"a", "ab", "y", "w0", "w4999", "w123"} {
		if !accepts(t, tok, s) {
			t.Errorf("%q refused", s)
		}
	}
	for _, s := range []string{"", "abc", "w", "w5000", "xy", "b"} {
		if accepts(t, tok, s) {
			t.Errorf("%q accepted", s)
		}
	}
}

// TestLimitsNegative checks that a negative limit is refused naming the
// field.
func TestLimitsNegative(t *testing.T) {
	g := Single("root", Lit("a"))
	for _, c := range []struct {
		lim   Limits
		field string
	}{{Limits{MaxStates: -1}, "MaxStates"}, {Limits{MaxStacks: -1}, "MaxStacks"},
		{Limits{MaxDepth: -1}, "MaxDepth"}, {Limits{MaxTableBytes: -1}, "MaxTableBytes"}} {
		if _, err := Compile(g, c.lim); err == nil || !strings.Contains(err.Error(), "Limits."+c.field+" is -1") {
			t.Errorf("%+v: %v", c.lim, err)
		}
	}
}

// TestTablesRestart checks that with a tiny MaxTableBytes (new tables
// after nearly every step) matchers and their clones move over correctly:
// the regexp comparison and the mask comparison still hold, and the tables
// were in fact restarted.
func TestTablesRestart(t *testing.T) {
	r := rand.New(rand.NewPCG(38, 4))
	pieces, special := randomVocab(r, 500)
	v := NewVocab(pieces, special)
	strs := allStrings([]string{"a", "b", "é", "\U00010000"}, 3)
	restarts := 0
	for range 30 {
		pat := randomRegexp(r, 3)
		a, err := Compile(regexpGrammar(t, pat), Limits{MaxTableBytes: 1})
		if err != nil {
			t.Fatal(err)
		}
		tok := NewTokens(a, v, 1<<20)
		re := regexp.MustCompile(`^(?:` + pat + `)$`)
		start := tok.Start()
		for _, s := range strs {
			if got, want := matches(start, s), re.MatchString(s); got != want {
				t.Fatalf("pattern %q, string %q: matcher %v, regexp %v", pat, s, got, want)
			}
		}
		walkMasks(t, r, pat, tok, 4)
		restarts += tok.resets
	}
	if restarts < 100 {
		t.Fatalf("tables restarted only %d times", restarts)
	}
}

// TestConcurrentMatchers runs 8 goroutines over one Tokens, each following
// its own string and comparing every mask with the one computed alone
// beforehand (run with -race).
func TestConcurrentMatchers(t *testing.T) {
	r := rand.New(rand.NewPCG(38, 5))
	pieces, special := randomVocab(r, 2000)
	v := NewVocab(pieces, special)
	a, err := Compile(regexpGrammar(t, jsonStringPattern), Limits{MaxTableBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	inputs := []string{`"abc\n\u00e9"`, `"\"\\"`, `"ééé€"`, `"x y z 0 9"`}
	want := make([][][]uint64, len(inputs))
	for i, in := range inputs {
		want[i] = masksAlong(t, NewTokens(a, v, 0), in)
	}
	shared := NewTokens(a, v, 4*8*v.words())
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			for range 20 {
				i := g % len(inputs)
				got := masksAlong(t, shared, inputs[i])
				for k := range got {
					if !slices.Equal(got[k], want[i][k]) {
						errs <- fmt.Errorf("%q: mask after %d bytes differs", inputs[i], k)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// masksAlong returns the masks before each byte of s and at its end.
func masksAlong(t *testing.T, tok *Tokens, s string) [][]uint64 {
	m := tok.Start()
	var out [][]uint64
	for i := range len(s) {
		out = append(out, m.Allowed())
		if err := m.AcceptBytes([]byte{s[i]}); err != nil {
			t.Errorf("%q at %d: %v", s, i, err)
			return out
		}
	}
	return append(out, m.Allowed())
}
