package grammar

import (
	"strings"
	"testing"
)

func mustGBNF(t testing.TB, src string) *Grammar {
	t.Helper()
	g, err := ParseGBNF(src)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestLeftRecursionRefused checks that a rule reaching itself without
// consuming a byte is refused, naming the rule and the cycle (directly,
// through another rule, and through a rule that may match ""), while
// recursion after a byte is accepted.
func TestLeftRecursionRefused(t *testing.T) {
	refused := []struct{ src, want string }{
		{`root ::= root "a" | "b"`, `rule "root" is left-recursive: it can reach itself without consuming a byte (root → root)`},
		{"root ::= x\nx ::= y \"a\"\ny ::= x | \"b\"", `(x → y → x)`},
		{"root ::= \"a\" x\nx ::= e? e* x \"c\"\ne ::= \"e\"", `rule "x" is left-recursive`},
		{"root ::= n x\nn ::= \"\" | \"q\"\nx ::= n root", `(root → x → root)`},
	}
	for _, c := range refused {
		_, err := Compile(mustGBNF(t, c.src), Limits{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Compile(%q) = %v, want an error containing %q", c.src, err, c.want)
		}
	}
	for _, src := range []string{`root ::= "a" root | ""`, "root ::= x\nx ::= \"(\" x* \")\" | y\ny ::= \"y\" x?"} {
		if _, err := Compile(mustGBNF(t, src), Limits{}); err != nil {
			t.Errorf("Compile(%q): %v", src, err)
		}
	}
}

// TestRecursion checks balanced parentheses (a recursive rule that is not
// a tail call): nesting accepted up to MaxDepth and refused past it with
// an error naming the limit; unbalanced strings refused.
func TestRecursion(t *testing.T) {
	a, err := Compile(parens(), Limits{MaxDepth: 200})
	if err != nil {
		t.Fatal(err)
	}
	tok := NewTokens(a, byteVocab(), 1<<20)
	for _, s := range []string{"x", "()", "(x(x)())", strings.Repeat("(", 199) + strings.Repeat(")", 199)} {
		if !accepts(t, tok, s) {
			t.Errorf("parens: %q refused", s)
		}
	}
	for _, s := range []string{"", "(", "())", "(()", "xx", "(y)"} {
		if accepts(t, tok, s) {
			t.Errorf("parens: %q accepted", s)
		}
	}
	err = tok.Start().AcceptBytes([]byte(strings.Repeat("(", 201)))
	if err == nil || !strings.Contains(err.Error(), "Limits.MaxDepth") {
		t.Fatalf("201 nested parentheses with MaxDepth 200: %v", err)
	}
}

// TestTailCalls checks that a rule calling itself as its last step (as
// GBNF lists are often written) keeps no frame per call: 5,000 items with
// MaxDepth 10.
func TestTailCalls(t *testing.T) {
	g := mustGBNF(t, "root ::= \"[\" items \"]\"\nitems ::= \"a\" (\",\" items)? | \"\"")
	a, err := Compile(g, Limits{MaxDepth: 10})
	if err != nil {
		t.Fatal(err)
	}
	tok := NewTokens(a, byteVocab(), 0)
	s := "[" + strings.TrimSuffix(strings.Repeat("a,", 5000), ",") + "]"
	m := tok.Start()
	if err := m.AcceptBytes([]byte(s)); err != nil || !m.CanEnd() || !m.Done() {
		t.Fatalf("5000 items: err %v, CanEnd %v, Done %v", err, m.CanEnd(), m.Done())
	}
}

// TestCanEndDone checks CanEnd and Done along the way, and that a refused
// token leaves the matcher unchanged.
func TestCanEndDone(t *testing.T) {
	g, err := Choice([]string{"a", "abc", "b"})
	if err != nil {
		t.Fatal(err)
	}
	tok := mustTokens(t, g, byteVocab())
	m := tok.Start()
	steps := []struct {
		b            string
		canEnd, done bool
	}{{"a", true, false}, {"b", false, false}, {"c", true, true}}
	if m.CanEnd() || m.Done() {
		t.Fatal("CanEnd or Done at the start")
	}
	for _, s := range steps {
		if err := m.AcceptBytes([]byte(s.b)); err != nil {
			t.Fatal(err)
		}
		if m.CanEnd() != s.canEnd || m.Done() != s.done {
			t.Fatalf("after %q: CanEnd %v Done %v, want %v %v", s.b, m.CanEnd(), m.Done(), s.canEnd, s.done)
		}
	}
	if err := m.Accept('x'); err == nil || !strings.Contains(err.Error(), `token 120 "x" is not allowed here`) {
		t.Fatalf("Accept after the end: %v", err)
	}
	if !m.Done() {
		t.Fatal("a refused token changed the matcher")
	}
}

// TestChoice checks that Choice matches exactly its options (prefixes of
// each other, the empty one, duplicates, multi-byte) and refuses no
// options.
func TestChoice(t *testing.T) {
	opts := []string{"", "ab", "abc", "abd", "b", "é", "éa", "ab", "\U0001F600"}
	g, err := Choice(opts)
	if err != nil {
		t.Fatal(err)
	}
	tok := mustTokens(t, g, byteVocab())
	for _, s := range opts {
		if !accepts(t, tok, s) {
			t.Errorf("option %q refused", s)
		}
	}
	for _, s := range []string{"a", "abcd", "bb", "\xc3", "c"} {
		if accepts(t, tok, s) {
			t.Errorf("%q accepted", s)
		}
	}
	if _, err := Choice(nil); err == nil {
		t.Fatal("Choice(nil) accepted")
	}
	many := make([]string, 20000)
	for i := range many {
		many[i] = strings.Repeat("x", i%7) + string(rune('A'+i%50)) + strings.Repeat("y", i/50)
	}
	g, err = Choice(many)
	if err != nil {
		t.Fatal(err)
	}
	tok = mustTokens(t, g, byteVocab()) // within the default MaxStacks
	for _, i := range []int{0, 1, 9999, 19999} {
		if !accepts(t, tok, many[i]) {
			t.Errorf("option %d %q refused", i, many[i])
		}
	}
}
