package tokenizer

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

// checkStream streams every prefix of ids and checks that no Add returns
// part of a character and that the results and Flush join to Decode.
func checkStream(tk *Tokenizer, ids []int32) error {
	s := tk.NewStream()
	var got strings.Builder
	for i, id := range ids {
		out, err := s.Add(id)
		if err != nil {
			return err
		}
		if !utf8.ValidString(out) {
			return fmt.Errorf("Add(%d) after %v = %q: not whole characters", id, ids[:i], out)
		}
		got.WriteString(out)
		want, err := tk.Decode(ids[:i+1])
		if err != nil {
			return err
		}
		// What is held back is at most one incomplete character.
		if !strings.HasPrefix(want, got.String()) || len(want)-got.Len() > 3*len("\uFFFD") {
			return fmt.Errorf("after %v: streamed %q, Decode %q", ids[:i+1], got.String(), want)
		}
		// Flushing here must give Decode of this prefix exactly.
		fork := &Stream{t: tk, pending: append([]byte(nil), s.pending...), strip: s.strip}
		if all := got.String() + fork.Flush(); all != want {
			return fmt.Errorf("prefix %v: streamed+flush %q, Decode %q", ids[:i+1], all, want)
		}
	}
	return nil
}

func streamTokenizers(t *testing.T) map[string]*Tokenizer {
	return map[string]*Tokenizer{
		"fixture":       loadFixture(t),
		"cl100k":        loadSpec(t, "tiktoken:cl100k_base"),
		"sentencepiece": loadSP(t, spLegacy),
		"metaspace":     loadSP(t, spMetaspace),
	}
}

const streamText = "Hello, world! Café, déjà vu. 日本語のテキスト 東京 🙂🚀🎉 — ok\n\tend "

// TestStreamEqualsDecode is the property for real encodings and for
// random ids (which make invalid and incomplete byte runs).
func TestStreamEqualsDecode(t *testing.T) {
	rng := rand.New(rand.NewPCG(16, 1))
	for name, tk := range streamTokenizers(t) {
		ids, err := tk.Encode(streamText, true)
		if err != nil {
			t.Fatal(err)
		}
		if err := checkStream(tk, ids); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if got, _ := tk.Decode(ids); got != streamText && name != "cl100k" {
			t.Errorf("%s: round trip %q", name, got)
		}
		for range 50 {
			random := make([]int32, 1+rng.IntN(40))
			for i := range random {
				random[i] = int32(rng.IntN(tk.VocabSize()))
			}
			if err := checkStream(tk, random); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}
	}
}

func TestStreamHoldsPartialCharacters(t *testing.T) {
	tk := loadFixture(t)
	ids, err := tk.Encode(partialText, false)
	if err != nil {
		t.Fatal(err)
	}
	s := tk.NewStream()
	held := 0
	for _, id := range ids {
		out, err := s.Add(id)
		if err != nil {
			t.Fatal(err)
		}
		if out == "" && !tk.special[id] {
			held++
		}
	}
	if held == 0 || s.Flush() != "" {
		t.Fatalf("held back %d times: want some, and nothing left at the end", held)
	}
	// An incomplete character at the end is one U+FFFD per byte.
	s = tk.NewStream()
	first := tk.vocabID(t, "æ")
	if out, _ := s.Add(first); out != "" {
		t.Fatalf("Add(first byte of 日) = %q", out)
	}
	if got := s.Flush(); got != "\uFFFD" {
		t.Fatalf("Flush = %q, want U+FFFD", got)
	}
}

// vocabID is the id of a vocab entry (in the byte alphabet for byte-level).
func (t *Tokenizer) vocabID(tb testing.TB, s string) int32 {
	tb.Helper()
	id, ok := t.enc.(*hfEncoder).lookup(s)
	if !ok {
		tb.Fatalf("%q not in the vocab", s)
	}
	return id
}
