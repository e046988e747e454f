package tokbench

import (
	"testing"

	sugarme "github.com/sugarme/tokenizer"
	"github.com/sugarme/tokenizer/pretrained"

	"github.com/tpcoord/tpcoord/coordinator/gateway/tokenizer"
)

func benchOurs(b *testing.B, spec string) {
	b.Run("load", func(b *testing.B) {
		for b.Loop() {
			if _, err := tokenizer.Load(spec); err != nil {
				b.Fatal(err)
			}
		}
	})
	tk, err := tokenizer.Load(spec)
	if err != nil {
		b.Fatal(err)
	}
	ids, _ := tk.Encode(mixedText, false)
	b.Logf("%s: %d bytes -> %d tokens", spec, len(mixedText), len(ids))
	b.Run("encode", func(b *testing.B) {
		b.SetBytes(int64(len(mixedText)))
		for b.Loop() {
			if _, err := tk.Encode(mixedText, false); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode", func(b *testing.B) {
		for b.Loop() {
			if _, err := tk.Decode(ids); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func benchSugarme(b *testing.B, path string) {
	b.Run("load", func(b *testing.B) {
		for b.Loop() {
			if _, err := pretrained.FromFile(path); err != nil {
				b.Fatal(err)
			}
		}
	})
	tk, err := pretrained.FromFile(path)
	if err != nil {
		b.Fatal(err)
	}
	en, err := tk.EncodeSingle(mixedText, false)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("sugarme %s: %d bytes -> %d tokens", path, len(mixedText), len(en.Ids))
	b.Run("encode", func(b *testing.B) {
		b.SetBytes(int64(len(mixedText)))
		for b.Loop() {
			if _, err := tk.EncodeSingle(mixedText, false); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode", func(b *testing.B) {
		for b.Loop() {
			_ = tk.Decode(en.Ids, true)
		}
	})
	_ = sugarme.Encoding{}
}

func BenchmarkFixture(b *testing.B) {
	b.Run("ours", func(b *testing.B) { benchOurs(b, fixture) })
	b.Run("sugarme", func(b *testing.B) { benchSugarme(b, fixture) })
}

func BenchmarkCl100k(b *testing.B) {
	b.Run("tiktoken-go", func(b *testing.B) { benchOurs(b, "tiktoken:cl100k_base") })
	path := cl100kJSON(b, cl100kPattern)
	b.Run("ours-json", func(b *testing.B) { benchOurs(b, path) })
	// sugarme compiles Split patterns with RE2, which has no lookahead:
	// it is given the pattern less its \s+(?!\S) branch.
	b.Run("sugarme-json", func(b *testing.B) {
		benchSugarme(b, cl100kJSON(b, `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+`))
	})
}
