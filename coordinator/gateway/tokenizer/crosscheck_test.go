package tokenizer

import (
	"fmt"
	"math"
	"reflect"
	"strings"
	"sync"
	"testing"
)

// cl100kPattern is cl100k_base's split, as the Llama-3 tokenizer.json
// has it (with \p{N}{1,3}): it needs lookahead, which RE2 lacks.
const cl100kPattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

var (
	cl100kJSONOnce sync.Once
	cl100kJSON     []byte
)

// cl100kAsTokenizerJSON converts the cl100k_base ranks to a Llama-3-style
// tokenizer.json (Split then ByteLevel, ignore_merges), with merges made
// as the transformers converter makes them: each token from any two
// tokens of lower rank that join to it.
func cl100kAsTokenizerJSON(t testing.TB) []byte {
	cl100kJSONOnce.Do(func() {
		vocab, list := cl100kSubset(t, math.MaxInt)
		var added []any
		for s, id := range tiktokenEncodings["cl100k_base"].specials {
			added = append(added, map[string]any{"id": id, "content": s, "special": true})
			vocab[s] = int(id)
		}
		cl100kJSON = mustJSON(map[string]any{
			"added_tokens": added,
			"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
				map[string]any{"type": "Split", "pattern": map[string]any{"Regex": cl100kPattern}, "behavior": "Isolated", "invert": false},
				map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}}},
			"post_processor": map[string]any{"type": "ByteLevel"},
			"decoder":        map[string]any{"type": "ByteLevel"},
			"model": map[string]any{"type": "BPE", "ignore_merges": true, "byte_fallback": false,
				"vocab": vocab, "merges": list},
		})
	})
	return cl100kJSON
}

// mixedText is a few KB of English, Go code and other scripts: the input
// of the cross-check and of the benchmarks.
var mixedText = strings.Repeat(`The quick brown fox jumps over the lazy dog; it's 12345 o'clock, isn't it?
func (s *Stream) Add(id int32) (string, error) {
	if id < 0 || int(id) >= len(s.t.pieces) { return "", fmt.Errorf("id %d", id) }
}
Café déjà vu, naïve résumé. 日本語のテキストと東京。 Привет, мир! 안녕하세요 🙂🚀🎉
    indented    spaces	and	tabs   
`, 8)

// TestTokenizerJSONMatchesTiktoken: the tokenizer.json path (Split with
// lookahead, ByteLevel, BPE by pair rank) gives what tiktoken gives.
func TestTokenizerJSONMatchesTiktoken(t *testing.T) {
	if testing.Short() {
		t.Skip("converts the 100k-token vocab")
	}
	hf, err := parseHF(cl100kAsTokenizerJSON(t))
	if err != nil {
		t.Fatal(err)
	}
	tk := loadSpec(t, "tiktoken:cl100k_base")
	texts := append(strings.Split(mixedText, "\n")[:6], mixedText, "hello <|endoftext|> world", "   ", "a\r\n\r\nb")
	for _, text := range texts {
		want, _ := tk.Encode(text, false)
		got, err := hf.Encode(text, false)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%.40q: tokenizer.json %v, %v\ntiktoken %v", text, head(got), err, head(want))
		}
		a, _ := hf.Decode(got)
		b, _ := tk.Decode(want)
		if a != b {
			t.Errorf("%.40q: decodes differ", text)
		}
	}
}

func head(ids []int32) string {
	if len(ids) > 20 {
		return fmt.Sprint(ids[:20]) + "..."
	}
	return fmt.Sprint(ids)
}
