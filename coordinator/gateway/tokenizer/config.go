package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// hfConfig is the part of tokenizer_config.json this package reads.
type hfConfig struct {
	ChatTemplate json.RawMessage `json:"chat_template"`
	BOSToken     json.RawMessage `json:"bos_token"`
	EOSToken     json.RawMessage `json:"eos_token"`
	AddBOSToken  *bool           `json:"add_bos_token"`
	AddEOSToken  *bool           `json:"add_eos_token"`
}

func readConfig(path string) (*hfConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var c hfConfig
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, err
	}
	return &c, nil
}

// tokenString reads a token given as a string or as {"content": ...};
// "" when absent or null.
func tokenString(field string, raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var obj struct {
		Content *string `json:"content"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil || obj.Content == nil {
		return "", fmt.Errorf("%s: neither a string nor an object with content", field)
	}
	return *obj.Content, nil
}

// chatTemplateSource is chat_template: a string, or a list of named
// templates of which "default" is used. Without one, a chat_template.jinja
// beside the config (as newer checkpoints ship it) is read.
func chatTemplateSource(raw json.RawMessage, dir string) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		data, err := os.ReadFile(filepath.Join(dir, "chat_template.jinja"))
		if errors.Is(err, fs.ErrNotExist) {
			return "", nil
		}
		if err != nil {
			return "", err
		}
		return string(data), nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var named []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(raw, &named); err != nil {
		return "", errors.New("chat_template: neither a string nor a list of {name, template}")
	}
	for _, n := range named {
		if n.Name == "default" {
			return n.Template, nil
		}
	}
	return "", errors.New(`chat_template: a list with no "default" template`)
}

// applyConfig takes BOS, EOS and the chat template from cfg.
func (t *Tokenizer) applyConfig(cfg *hfConfig, dir string) error {
	bos, err := tokenString("bos_token", cfg.BOSToken)
	if err != nil {
		return err
	}
	eos, err := tokenString("eos_token", cfg.EOSToken)
	if err != nil {
		return err
	}
	enc, _ := t.enc.(*hfEncoder)
	if eos != "" {
		if t.eos, t.hasEOS = enc.lookup(eos); !t.hasEOS {
			return fmt.Errorf("eos_token: %q is not a token", eos)
		}
	}
	if err := t.configSpecials(cfg, enc, bos, eos); err != nil {
		return err
	}
	src, err := chatTemplateSource(cfg.ChatTemplate, dir)
	if err != nil || src == "" {
		return err
	}
	t.chat, err = newChatTemplate(src, bos, eos)
	if err != nil {
		return fmt.Errorf("chat_template: %w", err)
	}
	return nil
}

// configSpecials applies add_bos_token and add_eos_token when the
// tokenizer.json has no post-processor template of its own.
func (t *Tokenizer) configSpecials(cfg *hfConfig, enc *hfEncoder, bos, eos string) error {
	if len(t.pre) > 0 || len(t.post) > 0 {
		return nil
	}
	if boolOr(cfg.AddBOSToken, false) {
		id, ok := enc.lookup(bos)
		if !ok {
			return fmt.Errorf("add_bos_token: bos_token %q is not a token", bos)
		}
		t.pre = []int32{id}
	}
	if boolOr(cfg.AddEOSToken, false) {
		if !t.hasEOS {
			return fmt.Errorf("add_eos_token: eos_token %q is not a token", eos)
		}
		t.post = []int32{t.eos}
	}
	return nil
}

func (e *hfEncoder) lookup(s string) (int32, bool) {
	if id, ok := e.addedIDs[s]; ok {
		return id, true
	}
	id, ok := e.model.vocab[s]
	return id, ok
}
