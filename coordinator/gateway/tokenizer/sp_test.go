package tokenizer

import (
	"fmt"
	"reflect"
	"testing"
)

// SentencePiece-style tokenizers, as tokenizer.json has them for Llama 2
// (normalizer prepends and replaces spaces with ▁, no pre-tokenizer) and
// for later models (a Metaspace pre-tokenizer); both fall back to bytes.
var (
	spLegacy = map[string]any{
		"normalizer": map[string]any{"type": "Sequence", "normalizers": []any{
			map[string]any{"type": "Prepend", "prepend": "▁"},
			map[string]any{"type": "Replace", "pattern": map[string]any{"String": " "}, "content": "▁"}}},
		"pre_tokenizer": nil,
		"decoder": map[string]any{"type": "Sequence", "decoders": []any{
			map[string]any{"type": "Replace", "pattern": map[string]any{"String": "▁"}, "content": " "},
			map[string]any{"type": "ByteFallback"}, map[string]any{"type": "Fuse"},
			map[string]any{"type": "Strip", "content": " ", "start": 1, "stop": 0}}},
	}
	spMetaspace = map[string]any{
		"normalizer":    nil,
		"pre_tokenizer": map[string]any{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": true},
		"decoder": map[string]any{"type": "Sequence", "decoders": []any{
			map[string]any{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": true},
			map[string]any{"type": "ByteFallback"}, map[string]any{"type": "Fuse"}}},
	}
)

var spMerges = []string{"▁ H", "l l", "e ll", "▁H ell", "▁Hell o", "▁ w", "o r", "▁w or", "l d", "▁wor ld"}

// spJSON is a tokenizer.json with the given pipeline and a small vocab:
// <unk> <s> </s>, the 256 byte tokens, a few characters and merges.
func spJSON(pipeline map[string]any) []byte {
	vocab := map[string]int{"<unk>": 0, "<s>": 1, "</s>": 2}
	for b := range 256 {
		vocab[fmt.Sprintf("<0x%02X>", b)] = 3 + b
	}
	for _, c := range []string{"▁", "H", "e", "l", "o", ",", "w", "r", "d", "!"} {
		vocab[c] = len(vocab)
	}
	for _, m := range spMerges {
		var a, b string
		fmt.Sscanf(m, "%s %s", &a, &b)
		vocab[a+b] = len(vocab)
	}
	tok := map[string]any{
		"added_tokens": []any{
			map[string]any{"id": 0, "content": "<unk>", "special": true},
			map[string]any{"id": 1, "content": "<s>", "special": true},
			map[string]any{"id": 2, "content": "</s>", "special": true}},
		"post_processor": map[string]any{"type": "TemplateProcessing",
			"single": []any{map[string]any{"SpecialToken": map[string]any{"id": "<s>", "type_id": 0}},
				map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}}},
			"special_tokens": map[string]any{"<s>": map[string]any{"id": "<s>", "ids": []int{1}, "tokens": []string{"<s>"}}}},
		"model": map[string]any{"type": "BPE", "unk_token": "<unk>", "byte_fallback": true,
			"fuse_unk": true, "vocab": vocab, "merges": spMerges},
	}
	for k, v := range pipeline {
		tok[k] = v
	}
	return mustJSON(tok)
}

func loadSP(t testing.TB, pipeline map[string]any) *Tokenizer {
	t.Helper()
	tk, err := parseHF(spJSON(pipeline))
	if err != nil {
		t.Fatal(err)
	}
	tk.name = "sp"
	return tk
}

func TestSentencePieceKnownAnswers(t *testing.T) {
	for name, p := range map[string]map[string]any{"legacy": spLegacy, "metaspace": spMetaspace} {
		tk := loadSP(t, p)
		hello, world := tk.vocabID(t, "▁Hello"), tk.vocabID(t, "▁world")
		comma, bang := tk.vocabID(t, ","), tk.vocabID(t, "!")
		cases := map[string][]int32{
			"Hello, world!": {1, hello, comma, world, bang},
			// é is not in the vocab: its two bytes, 0xC3 0xA9, stand in.
			"é": {1, tk.vocabID(t, "▁"), 3 + 0xC3, 3 + 0xA9},
		}
		for text, want := range cases {
			got, err := tk.Encode(text, true)
			if err != nil || !reflect.DeepEqual(got, want) {
				t.Errorf("%s: %q = %v, %v; want %v", name, text, got, err, want)
			}
			if back, err := tk.Decode(got); back != text || err != nil {
				t.Errorf("%s: decode %v = %q, %v", name, got, back, err)
			}
		}
	}
}
