package tokenizer

import (
	"fmt"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	tiktokenloader "github.com/pkoukk/tiktoken-go-loader"
)

// The conformance tokenizers in testdata/conformance are generated here,
// shaped as real checkpoints' tokenizer.json files are (their vocabularies
// cut small): go test -run TestConformanceFilesAreGenerated -update
// rewrites them and the texts; scripts/tokref/reference.sh then encodes
// the texts with the reference implementation into reference.json.

const conformanceDir = "testdata/conformance"

// conformanceTokenizers maps a name to the directory of its tokenizer.json
// (the GPT-2 style fixture is the package's own).
var conformanceTokenizers = map[string]string{
	"gpt2":    "testdata/tokenizer",
	"llama3":  conformanceDir + "/llama3",
	"qwen2":   conformanceDir + "/qwen2",
	"llama2":  conformanceDir + "/llama2",
	"mistral": conformanceDir + "/mistral",
}

// conformanceTexts are what every tokenizer encodes: scripts, whitespace
// runs, digits, code, emoji, contractions, and special tokens of every
// tokenizer (each is special in some, plain text in the others).
var conformanceTexts = []string{
	"Hello, world!", "The quick brown fox jumps over the lazy dog.", "", " ", "  leading and trailing  ",
	"tabs\tand\nnewlines\r\n\r\nend", "many     spaces   here", "\n\n\n", "   \n  \t ", "x \n", " \n y",
	"1234567890", "3.14159 and 2,718,281", "year 2024: 100% of 1e10 costs $5.99", "007 0x1F 1_000_000",
	"func main() {\n\tfmt.Println(\"hello, world\")\n}\n", "if (a && b) { return x->y; } // comment",
	"def f(x):\n    return x ** 2  # square\n", "<div class=\"x\">&amp; &lt;</div>",
	"Café déjà vu, naïve résumé, élève.", "日本語のテキストと東京。", "Привет, мир!", "안녕하세요 세계",
	"مرحبا بالعالم", "ﬁ ligature ｆｕｌｌｗｉｄｔｈ Ａ", "e\u0301 combining, Å and Å", "I'm you're it's we'll they'd I've",
	"DON'T SHOUT'S", "🙂🚀🎉", "👨\u200d👩\u200d👧\u200d👦 family", "🇫🇷 flag", "a🙂b 🙂 c",
	"<s>hello</s>", "text </s> more <s> end", "<|begin_of_text|>hi<|eot_id|>",
	"<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>", "<|im_start|>user\nhi<|im_end|>\n",
	"<|endoftext|>x", "<|system|>\nBe brief.</s>\n", "not special: <|im_start and <s", "<<s>> <</s>>",
	"The tokenizer turns text into tokens and tokens into text again.", "Streaming never splits a character: é, 日本, 🙂.",
	strings.Split(mixedText, "\n")[0], strings.Split(mixedText, "\n")[1], strings.Split(mixedText, "\n")[3],
}

// cl100kSubset returns cl100k_base's tokens of rank below n (the first
// 256 are its bytes) in the GPT-2 byte alphabet, with merges made as the
// transformers converter makes them.
func cl100kSubset(t testing.TB, n int) (map[string]int, [][2]string) {
	ranks, err := tiktokenloader.NewOfflineLoader().LoadTiktokenBpe("cl100k_base.tiktoken")
	if err != nil {
		t.Fatal(err)
	}
	vocab := map[string]int{}
	type m struct {
		a, b      string
		r, ra, rb int
	}
	var merges []m
	for tok, r := range ranks {
		if r >= n {
			continue
		}
		vocab[toByteChars(tok)] = r
		for i := 1; i < len(tok); i++ {
			ra, oka := ranks[tok[:i]]
			rb, okb := ranks[tok[i:]]
			if oka && okb && ra < r && rb < r {
				merges = append(merges, m{toByteChars(tok[:i]), toByteChars(tok[i:]), r, ra, rb})
			}
		}
	}
	sort.Slice(merges, func(i, j int) bool {
		x, y := merges[i], merges[j]
		if x.r != y.r {
			return x.r < y.r
		}
		if x.ra != y.ra {
			return x.ra < y.ra
		}
		return x.rb < y.rb
	})
	list := make([][2]string, len(merges))
	for i, mg := range merges {
		list[i] = [2]string{mg.a, mg.b}
	}
	return vocab, list
}

func addedTokens(vocab map[string]int, names ...string) []any {
	var out []any
	for _, s := range names {
		id := len(vocab)
		vocab[s] = id
		out = append(out, fixtureAdded{ID: id, Content: s, Special: true})
	}
	return out
}

func bosTemplate(bos string, id int) map[string]any {
	return map[string]any{"type": "TemplateProcessing",
		"single": []any{map[string]any{"SpecialToken": map[string]any{"id": bos, "type_id": 0}},
			map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}}},
		"pair": []any{map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}},
			map[string]any{"Sequence": map[string]any{"id": "B", "type_id": 1}}},
		"special_tokens": map[string]any{bos: map[string]any{"id": bos, "ids": []int{id}, "tokens": []string{bos}}}}
}

// qwen2Pattern is Qwen2's split: cl100k_base's with single digits.
const qwen2Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// genByteLevel is a Llama-3 or Qwen2 style tokenizer.json: a Split with
// lookahead, then ByteLevel, over a cut of cl100k_base's vocab.
func genByteLevel(t testing.TB, llama3 bool) []byte {
	vocab, merges := cl100kSubset(t, 3000)
	pattern, normalizer := cl100kPattern, any(nil)
	specials := []string{"<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"}
	var post any = bosTemplate("<|begin_of_text|>", 3000)
	if !llama3 {
		pattern, normalizer = qwen2Pattern, map[string]any{"type": "NFC"}
		specials = []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>"}
		post = map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}
	}
	added := addedTokens(vocab, specials...)
	return mustJSON(map[string]any{
		"version": "1.0", "truncation": nil, "padding": nil, "added_tokens": added, "normalizer": normalizer,
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": pattern}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}}},
		"post_processor": post,
		"decoder":        map[string]any{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
		"model": map[string]any{"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": nil,
			"end_of_word_suffix": nil, "fuse_unk": false, "byte_fallback": false, "ignore_merges": llama3,
			"vocab": vocab, "merges": merges},
	})
}

// trainSP learns SentencePiece-style BPE merges from corpus: spaces as ▁,
// words split before each ▁, most frequent pair first.
func trainSP(corpus string, size int) (map[string]int, [][2]string) {
	vocab := map[string]int{"<unk>": 0, "<s>": 1, "</s>": 2}
	for b := range 256 {
		vocab[fmt.Sprintf("<0x%02X>", b)] = 3 + b
	}
	counts := map[string]int{}
	for _, line := range strings.Split(corpus, "\n") {
		w := "▁" + strings.ReplaceAll(line, " ", "▁")
		for _, p := range splitBy(w, stdMatcher(regexpQuote("▁")), "MergedWithNext", false) {
			counts[p]++
		}
	}
	words := map[string][]string{}
	var chars []string
	seen := map[string]bool{}
	for w := range counts {
		for _, r := range w {
			words[w] = append(words[w], string(r))
			if !seen[string(r)] {
				seen[string(r)] = true
				chars = append(chars, string(r))
			}
		}
	}
	sort.Strings(chars)
	for _, c := range chars {
		vocab[c] = len(vocab)
	}
	var merges [][2]string
	for len(vocab) < size {
		best, n := bestPair(words, counts)
		if n < 2 {
			break
		}
		merges = append(merges, best)
		vocab[best[0]+best[1]] = len(vocab)
		for w, syms := range words {
			words[w] = applyMerge(syms, best)
		}
	}
	return vocab, merges
}

// genSentencePiece is a Llama-2 (legacy normalizer) or Mistral (Metaspace
// pre-tokenizer) style tokenizer.json, with byte fallback.
func genSentencePiece(legacy bool) []byte {
	vocab, merges := trainSP(fixtureCorpus+strings.Join(conformanceTexts[:20], "\n"), 900)
	pipeline := spMetaspace
	if legacy {
		pipeline = spLegacy
	}
	tok := map[string]any{
		"version": "1.0", "truncation": nil, "padding": nil,
		"added_tokens": []any{fixtureAdded{ID: 0, Content: "<unk>", Special: true},
			fixtureAdded{ID: 1, Content: "<s>", Special: true}, fixtureAdded{ID: 2, Content: "</s>", Special: true}},
		"post_processor": bosTemplate("<s>", 1),
		"model": map[string]any{"type": "BPE", "dropout": nil, "unk_token": "<unk>", "continuing_subword_prefix": nil,
			"end_of_word_suffix": nil, "fuse_unk": true, "byte_fallback": true, "ignore_merges": false,
			"vocab": vocab, "merges": merges},
	}
	for k, v := range pipeline {
		tok[k] = v
	}
	return mustJSON(tok)
}

func conformanceFiles(t testing.TB) map[string][]byte {
	return map[string][]byte{
		"texts.json":             mustJSON(conformanceTexts),
		"llama3/tokenizer.json":  genByteLevel(t, true),
		"qwen2/tokenizer.json":   genByteLevel(t, false),
		"llama2/tokenizer.json":  genSentencePiece(true),
		"mistral/tokenizer.json": genSentencePiece(false),
	}
}

func TestConformanceFilesAreGenerated(t *testing.T) {
	for name, want := range conformanceFiles(t) {
		checkGenerated(t, filepath.Join(conformanceDir, name), want, "run with -update, then scripts/tokref/reference.sh")
	}
}

func regexpQuote(s string) *regexp.Regexp { return regexp.MustCompile(regexp.QuoteMeta(s)) }
