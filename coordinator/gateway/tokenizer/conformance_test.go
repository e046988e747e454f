package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"testing"
)

// conformanceRef is a reference.json: what the reference implementation
// (scripts/tokref) made of every conformance text with one tokenizer.
type conformanceRef struct {
	Reference string `json:"reference"`
	Tokenizer string `json:"tokenizer"`
	Cases     []struct {
		Text            string  `json:"text"`
		IDs             []int32 `json:"ids"`
		IDsWithSpecials []int32 `json:"ids_with_specials"`
		Decoded         string  `json:"decoded"`
	} `json:"cases"`
}

// TestConformance: for every conformance tokenizer (GPT-2, Llama 3 and
// Qwen2 style byte-level BPE, Llama 2 and Mistral style SentencePiece
// BPE) and every conformance text, this package's ids, with and without
// the special tokens added around a sequence, and the text of the ids
// are the reference's: Hugging Face's tokenizers.js, run by
// scripts/tokref/reference.sh.
func TestConformance(t *testing.T) {
	var texts []string
	if err := json.Unmarshal(mustRead(t, filepath.Join(conformanceDir, "texts.json")), &texts); err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(conformanceTokenizers))
	for name := range conformanceTokenizers {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			var ref conformanceRef
			if err := json.Unmarshal(mustRead(t, filepath.Join(conformanceDir, name, "reference.json")), &ref); err != nil {
				t.Fatal(err)
			}
			if len(ref.Cases) != len(texts) {
				t.Fatalf("reference.json has %d texts, texts.json %d: run scripts/tokref/reference.sh", len(ref.Cases), len(texts))
			}
			tk := loadSpec(t, conformanceTokenizers[name])
			for i, c := range ref.Cases {
				if c.Text != texts[i] {
					t.Fatalf("reference.json's text %d is %q, texts.json's %q: run scripts/tokref/reference.sh", i, c.Text, texts[i])
				}
				ids, err := tk.Encode(c.Text, false)
				if err != nil || !slices.Equal(nonNilIDs(ids), nonNilIDs(c.IDs)) {
					t.Errorf("%q: ids %v, %v; %s: %v", c.Text, ids, err, ref.Reference, c.IDs)
				}
				if with, _ := tk.Encode(c.Text, true); !slices.Equal(nonNilIDs(with), nonNilIDs(c.IDsWithSpecials)) {
					t.Errorf("%q: with special tokens %v; %s: %v", c.Text, with, ref.Reference, c.IDsWithSpecials)
				}
				if text, _ := tk.Decode(c.IDs); text != c.Decoded {
					t.Errorf("%q: decoded %q; %s: %q", c.Text, text, ref.Reference, c.Decoded)
				}
			}
		})
	}
}

func nonNilIDs(ids []int32) []int32 {
	if ids == nil {
		return []int32{}
	}
	return ids
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
