package modeldir

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// dir writes files (name → content) into a new directory named tiny-llama.
func dir(t *testing.T, files map[string]string) string {
	t.Helper()
	d := filepath.Join(t.TempDir(), "tiny-llama")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(d, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// complete is a directory with every file Read looks at.
func complete() map[string]string {
	return map[string]string{
		ConfigFile:          `{"vocab_size": 1000, "eos_token_id": 2, "max_position_embeddings": 4096}`,
		TokenizerFile:       `{"model": {"type": "BPE"}}`,
		TokenizerConfigFile: `{"chat_template": "{{ messages }}"}`,
	}
}

func TestReadComplete(t *testing.T) {
	d := dir(t, complete())
	m, err := Read(d)
	if err != nil {
		t.Fatal(err)
	}
	want := Model{Dir: d, Name: "tiny-llama", Vocab: 1000, EOS: 2, EOSFrom: filepath.Join(d, ConfigFile), MaxModelLen: 4096,
		Tokenizer: filepath.Join(d, TokenizerFile), ChatTemplate: true}
	if *m != want {
		t.Errorf("Read: %+v\nwant %+v", *m, want)
	}
}

// TestReadEOS: the first of a list; generation_config.json's overrides
// config.json's; null or absent is none, and does not override.
func TestReadEOS(t *testing.T) {
	for _, c := range []struct {
		name, config, generation string
		want                     int
		from                     string
	}{
		{"int", `{"vocab_size": 10, "eos_token_id": 3}`, "", 3, ConfigFile},
		{"list", `{"vocab_size": 10, "eos_token_id": [4, 5]}`, "", 4, ConfigFile},
		{"absent", `{"vocab_size": 10}`, "", -1, ""},
		{"null", `{"vocab_size": 10, "eos_token_id": null}`, "", -1, ""},
		{"empty list", `{"vocab_size": 10, "eos_token_id": []}`, "", -1, ""},
		{"minus one", `{"vocab_size": 10, "eos_token_id": -1}`, "", -1, ""},
		{"generation overrides", `{"vocab_size": 10, "eos_token_id": 3}`, `{"eos_token_id": [7, 3]}`, 7, GenerationConfigFile},
		{"generation without eos", `{"vocab_size": 10, "eos_token_id": 3}`, `{"temperature": 0.6}`, 3, ConfigFile},
		{"generation null", `{"vocab_size": 10, "eos_token_id": 3}`, `{"eos_token_id": null}`, 3, ConfigFile},
	} {
		t.Run(c.name, func(t *testing.T) {
			files := complete()
			files[ConfigFile] = c.config
			if c.generation != "" {
				files[GenerationConfigFile] = c.generation
			}
			d := dir(t, files)
			m, err := Read(d)
			if err != nil {
				t.Fatal(err)
			}
			from := ""
			if c.from != "" {
				from = filepath.Join(d, c.from)
			}
			if m.EOS != c.want || m.EOSFrom != from {
				t.Errorf("EOS %d from %q, want %d from %q", m.EOS, m.EOSFrom, c.want, from)
			}
		})
	}
}

func TestReadOptional(t *testing.T) {
	files := complete()
	files[ConfigFile] = `{"vocab_size": 10, "max_position_embeddings": null}`
	delete(files, TokenizerConfigFile)
	m, err := Read(dir(t, files))
	if err != nil {
		t.Fatal(err)
	}
	if m.MaxModelLen != 0 || m.ChatTemplate {
		t.Errorf("without max_position_embeddings and tokenizer_config.json: %+v", *m)
	}
	files[TokenizerConfigFile] = `{"bos_token": "<s>"}`
	if m, err = Read(dir(t, files)); err != nil || m.ChatTemplate {
		t.Errorf("tokenizer_config.json without chat_template: %+v, %v", m, err)
	}
}

// TestReadErrors: every refusal names the file and, where one is at
// fault, the field.
func TestReadErrors(t *testing.T) {
	for _, c := range []struct {
		name  string
		edit  func(map[string]string)
		wants []string
	}{
		{"no config", func(f map[string]string) { delete(f, ConfigFile) }, []string{ConfigFile, "missing"}},
		{"config not JSON", func(f map[string]string) { f[ConfigFile] = `{"vocab_size": ` }, []string{ConfigFile, "not a JSON object"}},
		{"config an array", func(f map[string]string) { f[ConfigFile] = `[1]` }, []string{ConfigFile, "not a JSON object"}},
		{"config null", func(f map[string]string) { f[ConfigFile] = `null` }, []string{ConfigFile, "not a JSON object"}},
		{"no vocab", func(f map[string]string) { f[ConfigFile] = `{"eos_token_id": 2}` }, []string{ConfigFile, "vocab_size: missing"}},
		{"vocab a string", func(f map[string]string) { f[ConfigFile] = `{"vocab_size": "1000"}` }, []string{ConfigFile, "vocab_size", `"1000" is not a number`}},
		{"vocab zero", func(f map[string]string) { f[ConfigFile] = `{"vocab_size": 0}` }, []string{ConfigFile, "vocab_size", "[1, 2³¹)"}},
		{"vocab fraction", func(f map[string]string) { f[ConfigFile] = `{"vocab_size": 10.5}` }, []string{ConfigFile, "vocab_size"}},
		{"context negative", func(f map[string]string) { f[ConfigFile] = `{"vocab_size": 10, "max_position_embeddings": -1}` },
			[]string{ConfigFile, "max_position_embeddings"}},
		{"eos a string", func(f map[string]string) { f[ConfigFile] = `{"vocab_size": 10, "eos_token_id": "</s>"}` },
			[]string{ConfigFile, "eos_token_id"}},
		{"eos beyond vocab", func(f map[string]string) { f[ConfigFile] = `{"vocab_size": 10, "eos_token_id": 10}` },
			[]string{ConfigFile, "eos_token_id", "not below", "vocab_size 10"}},
		{"generation eos bad", func(f map[string]string) { f[GenerationConfigFile] = `{"eos_token_id": [true]}` },
			[]string{GenerationConfigFile, "eos_token_id"}},
		{"generation not JSON", func(f map[string]string) { f[GenerationConfigFile] = `eos` }, []string{GenerationConfigFile, "not a JSON object"}},
		{"no tokenizer", func(f map[string]string) { delete(f, TokenizerFile) }, []string{TokenizerFile, "missing"}},
		{"tokenizer not JSON", func(f map[string]string) { f[TokenizerFile] = `BPE` }, []string{TokenizerFile, "not a JSON object"}},
		{"tokenizer config not JSON", func(f map[string]string) { f[TokenizerConfigFile] = `{` }, []string{TokenizerConfigFile, "not a JSON object"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			files := complete()
			c.edit(files)
			_, err := Read(dir(t, files))
			if err == nil {
				t.Fatal("Read accepted it")
			}
			for _, w := range c.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

func TestReadNotADirectory(t *testing.T) {
	d := dir(t, complete())
	if _, err := Read(filepath.Join(d, "absent")); err == nil || !strings.Contains(err.Error(), "absent") {
		t.Errorf("a missing directory: %v", err)
	}
	if _, err := Read(filepath.Join(d, ConfigFile)); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("a file: %v", err)
	}
}
