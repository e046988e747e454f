package tokenizer

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/pkoukk/tiktoken-go"
	tiktokenloader "github.com/pkoukk/tiktoken-go-loader"
)

// randomText draws n characters from classes the encodings' patterns
// treat apart: letters of several scripts and cases, digits, spaces,
// tabs, line breaks, punctuation, apostrophes, emoji, combining marks, and
// now and then a special token.
func randomText(r *rand.Rand, n int) string {
	classes := []string{"abcxyzABCXYZ", "éüßÇ", "日本語東京", "Привет", "0123456789", "   ", "\t", "\r\n", "\n",
		".,;:!?-_/\\()[]{}<>|", "'", "🙂🚀", "\u0301\u0308", "'s 're 'll "}
	var b strings.Builder
	for b.Len() < n {
		if r.IntN(200) == 0 {
			b.WriteString([]string{"<|endoftext|>", "<|fim_prefix|>", "<|endofprompt|>"}[r.IntN(3)])
			continue
		}
		c := []rune(classes[r.IntN(len(classes))])
		for k := r.IntN(6); k >= 0; k-- {
			b.WriteRune(c[r.IntN(len(c))])
		}
	}
	return b.String()
}

// TestTiktokenBPEMatchesTiktokenGo: for every encoding, every id decodes
// to tiktoken-go's bytes, and the heap encoder gives tiktoken-go's ids
// (every special token allowed) on the mixed text, its lines, 300 random
// texts (fixed seed) and runs of one character up to 4 KiB, where
// tiktoken-go is still quick.
func TestTiktokenBPEMatchesTiktokenGo(t *testing.T) {
	tiktoken.SetBpeLoader(tiktokenloader.NewOfflineLoader())
	r := rand.New(rand.NewPCG(5, 6))
	texts := append(strings.Split(mixedText, "\n"), mixedText, "", "<|endoftext|>", "a<|endoftext|><|endoftext|>b", "   ", "a\r\n\r\nb")
	for range 300 {
		texts = append(texts, randomText(r, 1+r.IntN(300)))
	}
	for _, n := range []int{1, 2, 3, 100, 4096} {
		texts = append(texts, strings.Repeat("a", n), strings.Repeat(" ", n), strings.Repeat("\n/", n/2+1), strings.Repeat("7", n))
	}
	for name := range tiktokenEncodings {
		if testing.Short() && name != "cl100k_base" {
			continue
		}
		ref, err := tiktoken.GetEncoding(name)
		if err != nil {
			t.Fatal(err)
		}
		tk := loadSpec(t, "tiktoken:"+name)
		// Every id decodes to tiktoken-go's bytes (gaps to nothing).
		one := []int{0}
		for id, piece := range tk.pieces {
			one[0] = id
			if want := ref.Decode(one); string(piece) != want {
				t.Fatalf("%s: id %d decodes to %q, tiktoken-go %q", name, id, piece, want)
			}
		}
		for _, text := range texts {
			var want []int32
			for _, id := range ref.Encode(text, []string{"all"}, nil) {
				want = append(want, int32(id))
			}
			got, err := tk.Encode(text, false)
			if err != nil || !slices.Equal(got, want) {
				t.Fatalf("%s, %.60q: %v %v\ntiktoken-go %v", name, text, head(got), err, head(want))
			}
		}
	}
}

// TestTiktokenLongWord: 256 KiB of one letter, which tiktoken-go's
// quadratic merge took 47 s over, encodes (the test's time shows how
// long) and decodes back to itself.
func TestTiktokenLongWord(t *testing.T) {
	tk := loadSpec(t, "tiktoken:cl100k_base")
	text := strings.Repeat("a", 256<<10)
	ids, err := tk.Encode(text, false)
	if err != nil {
		t.Fatal(err)
	}
	if back, err := tk.Decode(ids); err != nil || back != text {
		t.Fatalf("%d ids decode to %d bytes (%v), want the %d-byte text", len(ids), len(back), err, len(text))
	}
}
