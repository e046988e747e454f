// Package modeldir reads what serving a Hugging Face model directory
// needs from its JSON files: the vocabulary size, the end-of-sequence
// token and the context from config.json (generation_config.json's
// eos_token_id overriding config.json's, as Hugging Face's generate does),
// and where the tokenizer and its chat template are. The weights are the
// model worker's to read. Every error names the file and the field.
package modeldir

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
)

// The files Read looks at, in the model directory.
const (
	ConfigFile           = "config.json"
	GenerationConfigFile = "generation_config.json"
	TokenizerFile        = "tokenizer.json"
	TokenizerConfigFile  = "tokenizer_config.json"
)

// Model is what Read found in a model directory.
type Model struct {
	// Dir is the directory, absolute.
	Dir string
	// Name is the directory's base name: the name a server lists the
	// model under unless told another.
	Name string
	// Vocab is config.json's vocab_size.
	Vocab int
	// EOS is the end-of-sequence token: generation_config.json's
	// eos_token_id if it gives one, else config.json's (the first of a
	// list); -1 if neither does.
	EOS int
	// EOSFrom is the file EOS was read from ("" if EOS is -1).
	EOSFrom string
	// MaxModelLen is config.json's max_position_embeddings (0: absent).
	MaxModelLen int
	// Tokenizer is the path of tokenizer.json.
	Tokenizer string
	// ChatTemplate reports whether tokenizer_config.json is present with
	// a chat_template.
	ChatTemplate bool
}

// Read reads the model directory dir.
func Read(dir string) (*Model, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("model directory %s: %w", dir, err)
	}
	if st, err := os.Stat(abs); err != nil {
		return nil, fmt.Errorf("model directory: %w", err)
	} else if !st.IsDir() {
		return nil, fmt.Errorf("model directory %s: not a directory", abs)
	}
	m := &Model{Dir: abs, Name: filepath.Base(abs), EOS: -1}
	if err := m.readConfig(); err != nil {
		return nil, err
	}
	if err := m.readGenerationConfig(); err != nil {
		return nil, err
	}
	if err := m.readTokenizer(); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *Model) readConfig() error {
	path := filepath.Join(m.Dir, ConfigFile)
	obj, err := readObject(path)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s: missing: a Hugging Face model directory has its config.json", path)
	}
	if err != nil {
		return err
	}
	raw, ok := obj["vocab_size"]
	if !ok {
		return fmt.Errorf("%s: vocab_size: missing", path)
	}
	if m.Vocab, err = integer(raw, 1); err != nil {
		return fmt.Errorf("%s: vocab_size: %w", path, err)
	}
	if raw, ok := obj["max_position_embeddings"]; ok && !isNull(raw) {
		if m.MaxModelLen, err = integer(raw, 0); err != nil {
			return fmt.Errorf("%s: max_position_embeddings: %w", path, err)
		}
	}
	return m.setEOS(path, obj)
}

// readGenerationConfig applies generation_config.json, if present: its
// eos_token_id, when it has one, overrides config.json's.
func (m *Model) readGenerationConfig() error {
	path := filepath.Join(m.Dir, GenerationConfigFile)
	obj, err := readObject(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return m.setEOS(path, obj)
}

// setEOS takes obj's eos_token_id if it has one: a token ID (-1: none),
// or a list whose first is the one (a null or an empty list: keep m's).
func (m *Model) setEOS(path string, obj map[string]json.RawMessage) error {
	raw, ok := obj["eos_token_id"]
	if !ok || isNull(raw) {
		return nil
	}
	var list []json.RawMessage
	if json.Unmarshal(raw, &list) == nil {
		if len(list) == 0 {
			return nil
		}
		raw = list[0]
	}
	eos, err := integer(raw, -1)
	if err != nil {
		return fmt.Errorf("%s: eos_token_id: %w", path, err)
	}
	if eos >= m.Vocab {
		return fmt.Errorf("%s: eos_token_id: %d is not below %s's vocab_size %d", path, eos, ConfigFile, m.Vocab)
	}
	m.EOS, m.EOSFrom = eos, path
	if eos < 0 {
		m.EOSFrom = ""
	}
	return nil
}

// readTokenizer checks that tokenizer.json is there and notes whether
// tokenizer_config.json holds a chat template. The gateway's tokenizer
// package parses both.
func (m *Model) readTokenizer() error {
	m.Tokenizer = filepath.Join(m.Dir, TokenizerFile)
	if _, err := readObject(m.Tokenizer); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s: missing: the API takes and returns text with the model's Hugging Face tokenizer", m.Tokenizer)
	} else if err != nil {
		return err
	}
	path := filepath.Join(m.Dir, TokenizerConfigFile)
	obj, err := readObject(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	raw, ok := obj["chat_template"]
	m.ChatTemplate = ok && !isNull(raw)
	return nil
}

// readObject reads the JSON object in the file at path; an error names
// the file (and wraps fs.ErrNotExist if it is not there).
func readObject(path string) (map[string]json.RawMessage, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(data, &obj); err != nil {
		return nil, fmt.Errorf("%s: not a JSON object: %w", path, err)
	}
	if obj == nil {
		return nil, fmt.Errorf("%s: not a JSON object: null", path)
	}
	return obj, nil
}

func isNull(raw json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(raw), []byte("null")) }

// integer reads raw as a whole number at least minimum and below 2³¹.
func integer(raw json.RawMessage, minimum int) (int, error) {
	var f float64
	if err := json.Unmarshal(raw, &f); err != nil {
		return 0, fmt.Errorf("%s is not a number", bytes.TrimSpace(raw))
	}
	if f != math.Trunc(f) || f < float64(minimum) || f >= 1<<31 {
		return 0, fmt.Errorf("%s is not an integer in [%d, 2³¹)", bytes.TrimSpace(raw), minimum)
	}
	return int(f), nil
}
