package grammar

import (
	"strings"
	"testing"
)

// accepts reports whether the grammar's matcher accepts s whole.
func accepts(t *testing.T, tok *Tokens, s string) bool {
	t.Helper()
	return matches(tok.Start(), s)
}

// TestParseGBNF checks what each construct of the subset matches, with
// strings that must and must not match whole.
func TestParseGBNF(t *testing.T) {
	cases := []struct {
		src      string
		yes, not []string
	}{
		{"root ::= expr\nexpr ::= term (\"+\" term)*\nterm ::= [0-9]+ | \"(\" expr \")\"\n",
			[]string{"1", "12+3", "(1+(2+3))+4"}, []string{"", "1+", "(1", "1)", "a"}},
		{`root ::= "\x41\u00e9\U0001F600\n\"\\" [\x30-\x39]`,
			[]string{"Aé😀\n\"\\5"}, []string{"Aé😀\n\"\\", "Aé😀\n\"\\a"}},
		{`root ::= [^a-z\]\-]+`, []string{"A", "Z9", "é"}, []string{"", "a", "]", "-", "Ab"}},
		{`root ::= "a"{2} "b"{1,} "c"{,2} "d"{1,3}`,
			[]string{"aabd", "aabbbccddd", "aabcd"}, []string{"abd", "aad", "aabcccd", "aabdddd"}},
		{"# a comment\nroot ::= ( \"x\" # inside\n  | \"y\" )\n  | \"z\"   # continued on a line starting with |\n\n",
			[]string{"x", "y", "z"}, []string{"", "xy"}},
		{"root ::= a | ()\na ::= \"q\" |", []string{"q", ""}, []string{"qq"}},
		{`root ::= . "!"?`, []string{"é", "\x00", "a!", "😀!"}, []string{"", "ab", "\xff"}},
		{"root ::= \"(\" root* \")\"", []string{"()", "(()(()))"}, []string{"(", "())", "(()"}},
		{`root ::= [] | "a" ()`, []string{"a"}, []string{"", "b"}},
		{`root ::= "a"*? "b"+*`, []string{"", "aab", "bbb", "a"}, []string{"ba", "c"}},
		{"root ::= x-y_1\r\nx-y_1 ::= [a-c]{3}\r\n", []string{"abc"}, []string{"ab"}},
	}
	v := byteVocab()
	for _, c := range cases {
		g, err := ParseGBNF(c.src)
		if err != nil {
			t.Fatalf("%q: %v", c.src, err)
		}
		tok := mustTokens(t, g, v)
		for _, s := range c.yes {
			if !accepts(t, tok, s) {
				t.Errorf("%q does not match %q", c.src, s)
			}
		}
		for _, s := range c.not {
			if accepts(t, tok, s) {
				t.Errorf("%q matches %q", c.src, s)
			}
		}
	}
}

// TestParseGBNFErrors checks that malformed sources are refused with the
// line:column of the fault and what is wrong.
func TestParseGBNFErrors(t *testing.T) {
	cases := []struct{ src, want string }{
		{"", "no rule named root"},
		{"x ::= \"a\"", "no rule named root"},
		{"root ::= x", "1:10: rule \"x\" is used but never defined"},
		{"root \"a\"", "1:6: expecting ::="},
		{"root ::= \"a", "1:10: literal is never closed"},
		{"root ::= [a-", "1:10: character class is never closed"},
		{"root ::= [z-a]", "1:12: range 'z'-'a' is backwards"},
		{"root ::= (\"a\"", "1:10: '(' is never closed"},
		{"root ::= \"a\")", "1:13: expecting the end of the line"},
		{"root ::= \"\\q\"", "1:11: unknown escape \\q"},
		{"root ::= \"\\xZZ\"", "1:11: \\x needs 2 hex digits"},
		{"root ::= \"\\uD800\"", "1:11: U+D800 is not a character"},
		{"root ::= \"a\"{3,1}", "1:13: repeat {3,1} has its maximum below its minimum"},
		{"root ::= \"a\"{1000001}", "1:13: repeat count"},
		{"root ::= \"a\"{}", "1:13: empty repeat"},
		{"root ::= \"a\"{2", "1:13: '{' is never closed"},
		{"root ::= <[1000]>", "1:10: token references"},
		{"root ::= \"a\"\nroot ::= \"b\"", "2:1: rule \"root\" is defined twice"},
		{"root ::= \"a\"\n  é ::= \"b\"", "2:3: expecting a rule name"},
		{"root ::= ( a\nb ::= \"x\" )", "2:1: rule \"b\" starts inside another rule's body"},
		{"root ::= @", "1:10: expecting a literal"},
		{"root ::= \xff", "not valid UTF-8"},
		{"root ::= " + strings.Repeat("(", 1001) + strings.Repeat(")", 1001), "nested deeper than 1000"},
	}
	for _, c := range cases {
		_, err := ParseGBNF(c.src)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseGBNF(%q) = %v, want an error containing %q", c.src, err, c.want)
		}
	}
}

// FuzzParseGBNF checks that no source makes the parser, the compiler or
// the matcher panic (compiled with small limits, then fed the source's
// own bytes).
func FuzzParseGBNF(f *testing.F) {
	for _, s := range []string{"root ::= \"a\" | [b-d]* x\nx ::= (\"(\" x \")\")?",
		"root ::= [^\\x00-\\x1f\"]{2,5} .", "root ::= \"\\U0001F600\"+ # c\n", "root ::= root"} {
		f.Add(s)
	}
	v := byteVocab()
	f.Fuzz(func(t *testing.T, src string) {
		g, err := ParseGBNF(src)
		if err != nil {
			return
		}
		a, err := Compile(g, Limits{MaxStates: 5000, MaxStacks: 100, MaxDepth: 50, MaxTableBytes: 1 << 20})
		if err != nil {
			return
		}
		m := NewTokens(a, v, 1<<16).Start()
		_ = m.Allowed()
		_ = m.AcceptBytes([]byte(src))
		_, _ = m.CanEnd(), m.Done()
	})
}

// TestJSONGBNF reads llama.cpp's json.gbnf (multi-line rules, comments,
// an empty alternative) and checks JSON texts against it.
func TestJSONGBNF(t *testing.T) {
	tok := mustTokens(t, mustGBNF(t, jsonGBNF), byteVocab())
	for _, s := range []string{`{}`, `{"a": [1, {"b": "x\n\"y\u00e9"}], "c": -1.5e3, "d": [true, null]}`, "{\n \"é\":\"\\\\\" }"} {
		if !accepts(t, tok, s) {
			t.Errorf("%q refused", s)
		}
	}
	for _, s := range []string{`[]`, `{"a"}`, `{"a": 01}`, `{"a": "\x"}`, "{\"a\": \"\x01\"}", `{"a": 1,}`} {
		if accepts(t, tok, s) {
			t.Errorf("%q accepted", s)
		}
	}
}
