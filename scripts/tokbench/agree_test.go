package tokbench

import (
	"reflect"
	"testing"

	"github.com/sugarme/tokenizer/pretrained"

	"github.com/tpcoord/tpcoord/coordinator/gateway/tokenizer"
)

// TestSugarmeAgrees reports where sugarme's ids and text differ from
// coordinator/gateway/tokenizer's (which matches tiktoken on cl100k_base). It logs
// rather than fails: it documents the candidate, it does not gate it.
func TestSugarmeAgrees(t *testing.T) {
	for _, text := range []string{"Hello, world!", "trailing spaces   ", "a  b", "日本 🙂", mixedText} {
		ours, err := tokenizer.Load(fixture)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := ours.Encode(text, false)
		sm, err := pretrained.FromFile(fixture)
		if err != nil {
			t.Fatal(err)
		}
		en, err := sm.EncodeSingle(text, false)
		if err != nil {
			t.Logf("%.30q: sugarme: %v", text, err)
			continue
		}
		got := make([]int32, len(en.Ids))
		for i, id := range en.Ids {
			got[i] = int32(id)
		}
		back := sm.Decode(en.Ids, true)
		t.Logf("%.30q: same ids %v; sugarme round trip exact %v (%.30q)", text, reflect.DeepEqual(got, want), back == text, back)
	}
}

func TestSugarmeLookahead(t *testing.T) {
	defer func() {
		if r := recover(); r != nil {
			t.Logf("sugarme on a Split pattern with lookahead: panic: %v", r)
		}
	}()
	path := cl100kJSON(t, cl100kPattern)
	_, err := pretrained.FromFile(path)
	t.Logf("sugarme on a Split pattern with lookahead: err %v", err)
}
