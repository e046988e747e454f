package tokenizer

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
)

func loadSpec(t testing.TB, spec string) *Tokenizer {
	t.Helper()
	tk, err := Load(spec)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// TestTiktokenKnownAnswers: the ids OpenAI's tiktoken gives (the README's
// "hello world" for each encoding; the mixed-script line and the special
// token from tiktoken-go's tests, which took them from the Python library).
func TestTiktokenKnownAnswers(t *testing.T) {
	cases := []struct {
		enc, text string
		want      []int32
	}{
		{"cl100k_base", "hello world", []int32{15339, 1917}},
		{"cl100k_base", "hello world!你好，世界！", []int32{15339, 1917, 0, 57668, 53901, 3922, 3574, 244, 98220, 6447}},
		{"cl100k_base", "hello <|endoftext|>", []int32{15339, 220, 100257}},
		{"o200k_base", "hello world", []int32{24912, 2375}},
		{"p50k_base", "hello world", []int32{31373, 995}},
		// p50k_base's runs of spaces (ids 50257–50280, above r50k_base's).
		{"p50k_base", "x" + strings.Repeat(" ", 20) + "y", []int32{87, 50274, 331}},
		{"r50k_base", "hello world", []int32{31373, 995}},
	}
	for _, c := range cases {
		tk := loadSpec(t, "tiktoken:"+c.enc)
		got, err := tk.Encode(c.text, true)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s %q = %v, %v; want %v", c.enc, c.text, got, err, c.want)
		}
		back, err := tk.Decode(got)
		if want := strings.ReplaceAll(c.text, "<|endoftext|>", ""); err != nil || back != want {
			t.Errorf("%s decode %v = %q, %v; want %q", c.enc, got, back, err, want)
		}
	}
	tk := loadSpec(t, "tiktoken:cl100k_base")
	if eos, ok := tk.EOS(); tk.VocabSize() != 100277 || eos != 100257 || !ok || tk.Name() != "tiktoken:cl100k_base" {
		t.Errorf("cl100k: vocab %d, eos %d %v, name %q", tk.VocabSize(), eos, ok, tk.Name())
	}
	if tk.HasChatTemplate() {
		t.Error("a tiktoken encoding has no chat template")
	}
}

// TestFixtureKnownAnswers pins the fixture's encoding; the pieces show
// why: byte-level BPE keeps the space with the word that follows it.
func TestFixtureKnownAnswers(t *testing.T) {
	tk := loadFixture(t)
	cases := []struct {
		text   string
		want   []int32
		pieces []string
	}{
		{"Hello, world!", []int32{1, 301, 47, 295, 36}, []string{"", "Hello", ",", " world", "!"}},
		{"The fox runs. 日本 🙂", []int32{1, 282, 332, 490, 49, 477, 281},
			[]string{"", "The", " fox", " runs", ".", " 日本", " 🙂"}},
		{"<|user|>\nhi</s>", []int32{1, 503, 13, 107, 108, 2}, []string{"", "", "\n", "h", "i", ""}},
	}
	for _, c := range cases {
		got, err := tk.Encode(c.text, true)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%q = %v, %v; want %v", c.text, got, err, c.want)
			continue
		}
		for i, id := range got {
			if p, _ := tk.piece(id); string(p) != c.pieces[i] {
				t.Errorf("%q: id %d is %q, want %q", c.text, id, p, c.pieces[i])
			}
		}
	}
	if eos, ok := tk.EOS(); eos != 2 || !ok || tk.VocabSize() != 505 {
		t.Errorf("eos %d %v, vocab %d: want 2 true 505", eos, ok, tk.VocabSize())
	}
	noBOS, _ := tk.Encode("Hello", false)
	if len(noBOS) != 1 || noBOS[0] != 301 {
		t.Errorf("Hello without special tokens = %v, want [301]", noBOS)
	}
}

func TestDecodeSkipsSpecialsAndRejectsBadIDs(t *testing.T) {
	tk := loadFixture(t)
	got, err := tk.Decode([]int32{1, 301, 2, 47, 503})
	if err != nil || got != "Hello," {
		t.Errorf("Decode = %q, %v; want \"Hello,\"", got, err)
	}
	for _, id := range []int32{-1, 505, 1 << 30} {
		if _, err := tk.Decode([]int32{301, id}); err == nil || !strings.Contains(err.Error(), "out of range") {
			t.Errorf("Decode(%d): err %v, want out of range", id, err)
		}
		s := tk.NewStream()
		if _, err := s.Add(id); err == nil {
			t.Errorf("Stream.Add(%d): no error", id)
		}
	}
}

func TestLoadTakesFileOrDirectory(t *testing.T) {
	for _, spec := range []string{"testdata/tokenizer", "testdata/tokenizer/tokenizer.json"} {
		tk := loadSpec(t, spec)
		if tk.Name() != spec || !tk.HasChatTemplate() {
			t.Errorf("%s: name %q, chat template %v", spec, tk.Name(), tk.HasChatTemplate())
		}
	}
}

func TestLoadErrorsNameFileAndField(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(f map[string]any)
		want   string
	}{
		{"pretok", func(f map[string]any) { f["pre_tokenizer"] = map[string]any{"type": "Whitespace"} },
			`pre_tokenizer.type: "Whitespace" is not supported`},
		{"split", func(f map[string]any) {
			f["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{
				map[string]any{"type": "Split", "pattern": map[string]any{"Regex": "(?<"}, "behavior": "Isolated"}}}
		}, "pre_tokenizer.pretokenizers[0].pattern.Regex"},
		{"decoder", func(f map[string]any) { f["decoder"] = map[string]any{"type": "WordPiece"} },
			`decoder.type: "WordPiece" is not supported`},
		{"model", func(f map[string]any) { f["model"].(map[string]any)["type"] = "Unigram" }, `model.type: "Unigram"`},
		{"merge", func(f map[string]any) { f["model"].(map[string]any)["merges"] = []any{[]string{"Ġ", "nope"}} },
			"model.merges[0]"},
		{"vocab", func(f map[string]any) { f["model"].(map[string]any)["vocab"] = map[string]any{"a": -1} },
			`model.vocab["a"]`},
		{"id", func(f map[string]any) { f["added_tokens"].([]any)[3].(map[string]any)["id"] = 1 << 40 },
			"added_tokens[3].id"},
		{"type", func(f map[string]any) { f["decoder"] = map[string]any{"type": 7} }, "decoder"},
	}
	tok, _ := genFixture()
	for _, c := range cases {
		var f map[string]any
		if err := json.Unmarshal(tok, &f); err != nil {
			t.Fatal(err)
		}
		c.mutate(f)
		dir := t.TempDir()
		path := filepath.Join(dir, "tokenizer.json")
		if err := os.WriteFile(path, mustJSON(f), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Load(dir)
		if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want the path and %q", c.name, err, c.want)
		}
	}
	for spec, want := range map[string]string{"tiktoken:nope": "unknown encoding", "": "empty spec",
		"testdata/none": "no such file"} {
		if _, err := Load(spec); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Load(%q): err %v, want %q", spec, err, want)
		}
	}
}

func TestConfigErrorsNameField(t *testing.T) {
	dir := t.TempDir()
	tok, _ := genFixture()
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), tok, 0o644); err != nil {
		t.Fatal(err)
	}
	for cfg, want := range map[string]string{
		`{"eos_token": "<nope>"}`:                     "eos_token",
		`{"eos_token": 7}`:                            "eos_token",
		`{"chat_template": "{% for %}"}`:              "chat_template",
		`{"chat_template": [{"name": "tool_use"}]}`:   "default",
		`{"bos_token": {"content": "<s>"}, "x": 1}`:   "",
		`{"eos_token": {"content": "</s>"}, "a": []}`: "",
	} {
		path := filepath.Join(dir, "tokenizer_config.json")
		if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Load(dir)
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v", cfg, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: err %v, want the path and %q", cfg, err, want)
		}
	}
}

// TestConcurrentUse is for the race detector: one Tokenizer of each
// kind, many requests.
func TestConcurrentUse(t *testing.T) {
	fixture, cl100k := loadFixture(t), loadSpec(t, "tiktoken:cl100k_base")
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		tk := fixture
		if g%2 == 1 {
			tk = cl100k
		}
		wg.Go(func() {
			for i := range 20 {
				text := strings.Repeat("日本 🙂 Hello, world! ", g+i)
				ids, err := tk.Encode(text, true)
				if err == nil && tk.HasChatTemplate() {
					_, err = tk.ApplyChatTemplate([]ChatMessage{{"user", text}}, true)
				}
				if err == nil {
					err = checkStream(tk, ids)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestNoChatTemplate(t *testing.T) {
	tk := loadSpec(t, "tiktoken:r50k_base")
	if _, err := tk.ApplyChatTemplate([]ChatMessage{{"user", "hi"}}, true); !errors.Is(err, ErrNoChatTemplate) {
		t.Errorf("err %v, want ErrNoChatTemplate", err)
	}
}
