package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// loadMutated writes the fixture's tokenizer.json changed by mutate into
// a directory of its own and loads it.
func loadMutated(t *testing.T, mutate func(f map[string]any)) (string, error) {
	t.Helper()
	tok, _ := genFixture()
	var f map[string]any
	if err := json.Unmarshal(tok, &f); err != nil {
		t.Fatal(err)
	}
	mutate(f)
	dir := t.TempDir()
	path := filepath.Join(dir, "tokenizer.json")
	if err := os.WriteFile(path, mustJSON(f), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(dir)
	return path, err
}

// TestOtherModelsRefusedByName: WordPiece, WordLevel and Unigram models,
// with the fields the tokenizers library writes for them (Unigram's vocab
// is a list of [piece, score], which does not decode as BPE's map), are
// refused naming model.type and the type, not with a decoding error.
func TestOtherModelsRefusedByName(t *testing.T) {
	models := map[string]map[string]any{
		"Unigram": {"type": "Unigram", "unk_id": 0, "byte_fallback": false,
			"vocab": []any{[]any{"<unk>", 0.0}, []any{"▁the", -3.2}, []any{"s", -4.5}}},
		"WordPiece": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
			"max_input_chars_per_word": 100, "vocab": map[string]int{"[UNK]": 0, "the": 1, "##s": 2}},
		"WordLevel": {"type": "WordLevel", "unk_token": "[UNK]", "vocab": map[string]int{"[UNK]": 0, "the": 1}},
	}
	for typ, m := range models {
		path, err := loadMutated(t, func(f map[string]any) { f["model"] = m })
		want := `model.type: "` + typ + `" (`
		if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), want) ||
			!strings.Contains(err.Error(), "is not supported: only BPE models are") || strings.Contains(err.Error(), "cannot unmarshal") {
			t.Errorf("%s: err %v; want the path and %q, not a JSON error", typ, err, want)
		}
	}
	_, err := loadMutated(t, func(f map[string]any) { f["model"].(map[string]any)["type"] = "Bigram" })
	if err == nil || !strings.Contains(err.Error(), `model.type: "Bigram" is not a model type`) {
		t.Errorf("Bigram: err %v", err)
	}
}

// TestUnsupportedComponentsRefusedByName: every normalizer, pre-tokenizer,
// decoder and post-processor type of the tokenizers library that this
// package does not support, written with its own fields, is refused
// naming the field and the type, and listing what is supported.
func TestUnsupportedComponentsRefusedByName(t *testing.T) {
	cases := []struct {
		field string
		value map[string]any
	}{
		{"normalizer", map[string]any{"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true, "strip_accents": nil, "lowercase": true}},
		{"normalizer", map[string]any{"type": "Precompiled", "precompiled_charsmap": "ALQCAACEAAAA"}},
		{"normalizer", map[string]any{"type": "Strip", "strip_left": true, "strip_right": true}},
		{"normalizer", map[string]any{"type": "StripAccents"}},
		{"normalizer", map[string]any{"type": "Nmt"}},
		{"normalizer", map[string]any{"type": "ByteLevel"}},
		{"pre_tokenizer", map[string]any{"type": "BertPreTokenizer"}},
		{"pre_tokenizer", map[string]any{"type": "Whitespace"}},
		{"pre_tokenizer", map[string]any{"type": "WhitespaceSplit"}},
		{"pre_tokenizer", map[string]any{"type": "Punctuation", "behavior": "Isolated"}},
		{"pre_tokenizer", map[string]any{"type": "CharDelimiterSplit", "delimiter": "_"}},
		{"pre_tokenizer", map[string]any{"type": "UnicodeScripts"}},
		{"pre_tokenizer", map[string]any{"type": "FixedLength", "length": 5}},
		{"decoder", map[string]any{"type": "WordPiece", "prefix": "##", "cleanup": true}},
		{"decoder", map[string]any{"type": "BPEDecoder", "suffix": "</w>"}},
		{"decoder", map[string]any{"type": "CTC", "pad_token": "<pad>", "word_delimiter_token": "|", "cleanup": true}},
		{"post_processor", map[string]any{"type": "BertProcessing", "sep": []any{"[SEP]", 102}, "cls": []any{"[CLS]", 101}}},
		{"post_processor", map[string]any{"type": "RobertaProcessing", "sep": []any{"</s>", 2}, "cls": []any{"<s>", 0}, "trim_offsets": true, "add_prefix_space": false}},
	}
	for _, c := range cases {
		typ := c.value["type"].(string)
		for _, nested := range []bool{false, true} {
			value, field := any(c.value), c.field
			if nested { // inside a Sequence, whose field names the step
				key := map[string]string{"normalizer": "normalizers", "pre_tokenizer": "pretokenizers",
					"decoder": "decoders", "post_processor": "processors"}[c.field]
				value = map[string]any{"type": "Sequence", key: []any{c.value}}
				field += "." + key + "[0]"
			}
			path, err := loadMutated(t, func(f map[string]any) { f[c.field] = value })
			want := field + `.type: "` + typ + `" is not supported (supported: `
			if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), want) {
				t.Errorf("%s %s: err %v; want the path and %q", field, typ, err, want)
			}
		}
	}
	_, err := loadMutated(t, func(f map[string]any) { f["decoder"] = map[string]any{"type": "Wordpiece"} })
	if err == nil || !strings.Contains(err.Error(), `decoder.type: "Wordpiece" is not a type the Hugging Face tokenizers library knows there`) {
		t.Errorf("Wordpiece: err %v", err)
	}
	_, err = loadMutated(t, func(f map[string]any) { f["decoder"] = map[string]any{"prefix": "##"} })
	if err == nil || !strings.Contains(err.Error(), "decoder.type: missing") {
		t.Errorf("no type: err %v", err)
	}
}

// TestHubIDGetsTheHint: a hub ID (no such local path) is refused once,
// saying that only local files are read and how to get them.
func TestHubIDGetsTheHint(t *testing.T) {
	_, err := Load("meta-llama/Llama-3.1-8B")
	if err == nil {
		t.Fatal("loaded a hub ID")
	}
	msg := err.Error()
	for _, want := range []string{"tokenizer: meta-llama/Llama-3.1-8B: no such file or directory", "nothing is downloaded",
		`"meta-llama/Llama-3.1-8B" looks like a Hugging Face hub ID`, "huggingface-cli download meta-llama/Llama-3.1-8B --local-dir DIR"} {
		if !strings.Contains(msg, want) {
			t.Errorf("err %q, want %q", msg, want)
		}
	}
	if strings.Count(msg, "tokenizer:") != 1 {
		t.Errorf("err %q: want one tokenizer: prefix", msg)
	}
	_, err = Load(filepath.Join(t.TempDir(), "x", "tokenizer.json"))
	if err == nil || strings.Contains(err.Error(), "hub ID") || !strings.Contains(err.Error(), "nothing is downloaded") {
		t.Errorf("a missing local file: err %v; want no hub hint", err)
	}
	_, err = Load(t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "the directory has no tokenizer.json") {
		t.Errorf("a directory without tokenizer.json: err %v", err)
	}
}
