// Package tokenizer turns text into token ids and back for the gateway:
// Hugging Face tokenizer.json files (BPE models, byte-level or
// SentencePiece-style), tiktoken encodings, streaming detokenization that
// never splits a UTF-8 character, and chat templates.
package tokenizer

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"
)

// Tokenizer encodes and decodes text. It is immutable after Load and safe
// for concurrent use.
type Tokenizer struct {
	name string
	enc  encoder
	// pieces[id] is what id decodes to; special[id] ids decode to nothing.
	pieces  [][]byte
	special []bool
	// stripLeading spaces are dropped from the start of decoded text.
	stripLeading int
	pre, post    []int32 // added around a sequence by addSpecial
	eos          int32
	hasEOS       bool
	chat         *chatTemplate
	// specials are the special tokens' texts: those a chat's messages
	// may not write (EncodeChat).
	specials *specialSet
}

// encoder is the text-to-ids half of a tokenizer format. Special and
// added tokens in text are their ids; then, in the text between them, each
// code point that plain maps is replaced by its text (EncodeChat's
// placeholders: that text is never read as an added token).
type encoder interface {
	encode(text string, plain map[rune]string) ([]int32, error)
}

// Load reads a tokenizer. spec is "tiktoken:<encoding>" (cl100k_base,
// o200k_base, p50k_base, r50k_base: embedded, no network), a path to a
// Hugging Face tokenizer.json, or a directory holding one. A
// tokenizer_config.json beside the tokenizer.json is read too, for
// chat_template, bos_token, eos_token, add_bos_token and add_eos_token.
func Load(spec string) (*Tokenizer, error) {
	if name, ok := strings.CutPrefix(spec, "tiktoken:"); ok {
		return loadTiktoken(name)
	}
	if spec == "" {
		return nil, fmt.Errorf("tokenizer: empty spec: give a tokenizer.json, its directory, or tiktoken:<encoding>")
	}
	path := spec
	if st, err := os.Stat(spec); err == nil && st.IsDir() {
		path = filepath.Join(spec, "tokenizer.json")
	}
	return loadHF(spec, path)
}

// Name is the spec the tokenizer was loaded from.
func (t *Tokenizer) Name() string { return t.name }

// VocabSize is the highest id plus one, added tokens included.
func (t *Tokenizer) VocabSize() int { return len(t.pieces) }

// EOS is the end-of-sequence id, if the tokenizer names one.
func (t *Tokenizer) EOS() (int32, bool) { return t.eos, t.hasEOS }

// Encode returns text's ids. Added and special tokens written in the text
// are their ids, as in Hugging Face tokenizers; addSpecial adds what the
// tokenizer adds around a sequence (BOS, for most), as add_special_tokens.
func (t *Tokenizer) Encode(text string, addSpecial bool) ([]int32, error) {
	ids, err := t.enc.encode(text, nil)
	if err != nil {
		return nil, err
	}
	return t.wrap(ids, addSpecial), nil
}

// wrap adds, if addSpecial, what the tokenizer adds around a sequence.
func (t *Tokenizer) wrap(ids []int32, addSpecial bool) []int32 {
	if !addSpecial || (len(t.pre) == 0 && len(t.post) == 0) {
		return ids
	}
	out := make([]int32, 0, len(t.pre)+len(ids)+len(t.post))
	out = append(out, t.pre...)
	out = append(out, ids...)
	return append(out, t.post...)
}

// Decode returns the text of ids, special tokens skipped. A byte that is
// not part of a valid UTF-8 character becomes U+FFFD.
func (t *Tokenizer) Decode(ids []int32) (string, error) {
	var raw []byte
	for _, id := range ids {
		p, err := t.piece(id)
		if err != nil {
			return "", err
		}
		raw = append(raw, p...)
	}
	raw, _ = stripSpaces(raw, t.stripLeading)
	out, _ := appendValid(make([]byte, 0, len(raw)), raw, true)
	return string(out), nil
}

// piece is id's bytes, nil for a special token.
func (t *Tokenizer) piece(id int32) ([]byte, error) {
	if id < 0 || int(id) >= len(t.pieces) {
		return nil, fmt.Errorf("token id %d out of range [0, %d)", id, len(t.pieces))
	}
	if t.special[id] {
		return nil, nil
	}
	return t.pieces[id], nil
}

// appendValid appends the UTF-8 characters at the start of src to dst and
// returns how many bytes of src it used. A byte that cannot begin a valid
// character becomes U+FFFD. An incomplete character at the end of src is
// left unused, unless final, when each of its bytes becomes U+FFFD.
func appendValid(dst, src []byte, final bool) ([]byte, int) {
	i := 0
	for i < len(src) {
		if !final && !utf8.FullRune(src[i:]) {
			break
		}
		r, n := utf8.DecodeRune(src[i:])
		if r == utf8.RuneError && n == 1 {
			dst = append(dst, "\uFFFD"...)
		} else {
			dst = append(dst, src[i:i+n]...)
		}
		i += n
	}
	return dst, i
}

// stripSpaces drops up to n leading spaces from b and returns how many of
// the n are still to be dropped: n less those dropped, or 0 once b holds a
// byte that is not a space.
func stripSpaces(b []byte, n int) ([]byte, int) {
	for n > 0 && len(b) > 0 {
		if b[0] != ' ' {
			return b, 0
		}
		b = b[1:]
		n--
	}
	return b, n
}

// Pieces returns every token's bytes (pieces[id]) and whether it is
// special (special tokens decode to nothing). The slices are the
// tokenizer's own: read-only.
func (t *Tokenizer) Pieces() (pieces [][]byte, special []bool) { return t.pieces, t.special }
