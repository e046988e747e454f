package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
)

// decodeSpec is what a tokenizer.json decoder does, reduced to what every
// supported decoder is: a map from each token to bytes, concatenated, with
// some leading spaces stripped from the whole text. That reduction is what
// lets a Stream emit text byte-exactly as Decode would.
type decodeSpec struct {
	byteLevel    bool        // token chars are the GPT-2 byte alphabet
	byteFallback bool        // <0xHH> tokens are single bytes
	replace      [][2]string // applied to each token, in order
	stripLeading int         // spaces stripped from the start of the text
}

func buildDecoder(field string, raw json.RawMessage, d *decodeSpec) error {
	var c hfComponent
	if ok, err := component(field, raw, &c, hfDecoders, okDecoders); !ok {
		return err
	}
	switch c.Type {
	case "Sequence":
		for i, r := range c.Decoders {
			if err := buildDecoder(fmt.Sprintf("%s.decoders[%d]", field, i), r, d); err != nil {
				return err
			}
		}
	case "ByteLevel":
		d.byteLevel = true
	case "ByteFallback":
		d.byteFallback = true
	case "Fuse":
	case "Replace":
		if c.Pattern == nil || c.Pattern.String == nil || *c.Pattern.String == "" {
			return fmt.Errorf("%s.pattern: only a non-empty String pattern is supported", field)
		}
		d.replace = append(d.replace, [2]string{*c.Pattern.String, c.Content})
	case "Strip":
		if c.Content != " " || c.Stop != 0 || c.Start < 0 || c.Start > 16 {
			return fmt.Errorf("%s: only stripping up to 16 leading spaces is supported", field)
		}
		d.stripLeading = c.Start
	case "Metaspace":
		if c.Replacement == "" {
			return fmt.Errorf("%s.replacement: missing", field)
		}
		d.replace = append(d.replace, [2]string{c.Replacement, " "})
		scheme, err := metaspaceScheme(field, c)
		if err != nil {
			return err
		}
		if scheme != "never" {
			d.stripLeading = 1
		}
	default:
		return unsupported(field, c.Type, hfDecoders, okDecoders)
	}
	return nil
}

// tokenBytes is what token s decodes to under d.
func (d *decodeSpec) tokenBytes(s string) []byte {
	if d.byteFallback {
		if b, ok := fallbackByte(s); ok {
			return []byte{b}
		}
	}
	for _, r := range d.replace {
		s = strings.ReplaceAll(s, r[0], r[1])
	}
	if !d.byteLevel {
		return []byte(s)
	}
	out := make([]byte, 0, len(s))
	for _, r := range s {
		if b, ok := charBytes[r]; ok {
			out = append(out, b)
		} else {
			out = append(out, string(r)...)
		}
	}
	return out
}

// fallbackByte parses a byte-fallback token, "<0xE2>".
func fallbackByte(s string) (byte, bool) {
	if len(s) != 6 || !strings.HasPrefix(s, "<0x") || s[5] != '>' {
		return 0, false
	}
	var b byte
	for _, c := range s[3:5] {
		var v byte
		switch {
		case c >= '0' && c <= '9':
			v = byte(c - '0')
		case c >= 'A' && c <= 'F':
			v = byte(c-'A') + 10
		case c >= 'a' && c <= 'f':
			v = byte(c-'a') + 10
		default:
			return 0, false
		}
		b = b<<4 | v
	}
	return b, true
}

// buildPostProcessor returns the ids add_special_tokens puts before and
// after a single sequence; ok is false when the file has no template, so
// that tokenizer_config.json's add_bos_token decides.
func buildPostProcessor(field string, raw json.RawMessage, vocab func(string) (int32, bool)) (pre, post []int32, ok bool, err error) {
	var c hfComponent
	if has, err := component(field, raw, &c, hfPostProcessors, okPostProcessors); !has {
		return nil, nil, false, err
	}
	switch c.Type {
	case "ByteLevel":
		return nil, nil, false, nil
	case "Sequence":
		for i, r := range c.Processors {
			p, q, has, err := buildPostProcessor(fmt.Sprintf("%s.processors[%d]", field, i), r, vocab)
			if err != nil || has {
				return p, q, has, err
			}
		}
		return nil, nil, false, nil
	case "TemplateProcessing":
		pre, post, err = templateProcessing(field, c, vocab)
		return pre, post, err == nil, err
	}
	return nil, nil, false, unsupported(field, c.Type, hfPostProcessors, okPostProcessors)
}

func templateProcessing(field string, c hfComponent, vocab func(string) (int32, bool)) (pre, post []int32, err error) {
	seen := false
	for i, item := range c.Single {
		switch {
		case item.Sequence != nil:
			seen = true
		case item.SpecialToken != nil:
			ids, err := specialIDs(c, item.SpecialToken.ID, vocab)
			if err != nil {
				return nil, nil, fmt.Errorf("%s.single[%d]: %w", field, i, err)
			}
			if seen {
				post = append(post, ids...)
			} else {
				pre = append(pre, ids...)
			}
		default:
			return nil, nil, fmt.Errorf("%s.single[%d]: neither SpecialToken nor Sequence", field, i)
		}
	}
	return pre, post, nil
}

func specialIDs(c hfComponent, name string, vocab func(string) (int32, bool)) ([]int32, error) {
	if st, ok := c.SpecialTokens[name]; ok {
		out := make([]int32, 0, len(st.IDs))
		for _, id := range st.IDs {
			if id < 0 || id >= maxID {
				return nil, fmt.Errorf("special_tokens[%q].ids: %d out of range", name, id)
			}
			out = append(out, int32(id))
		}
		return out, nil
	}
	if id, ok := vocab(name); ok {
		return []int32{id}, nil
	}
	return nil, fmt.Errorf("special token %q is not in the vocab", name)
}
