package tokenizer

import (
	"fmt"
	"strings"

	"github.com/dlclark/regexp2"
	tiktokenloader "github.com/pkoukk/tiktoken-go-loader"
)

// tiktokenPatterns are the encodings' pre-tokenizer patterns, as
// tiktoken-go compiles them (regexp2, no options).
var tiktokenPatterns = map[string]string{
	"cl100k_base": `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`,
	"o200k_base": strings.Join([]string{
		`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?`,
		`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?`,
		`\p{N}{1,3}`, ` ?[^\s\p{L}\p{N}]+[\r\n/]*`, `\s*[\r\n]+`, `\s+(?!\S)`, `\s+`,
	}, "|"),
	"p50k_base": gpt2Pattern,
	"r50k_base": gpt2Pattern,
}

// tiktokenBPE encodes as tiktoken-go does, with every special token
// allowed: the text is cut at special tokens, each part split by the
// encoding's pattern, and each piece that is not itself a token merged
// from its bytes, always the adjacent pair whose bytes form the token of
// lowest rank first, the leftmost on a tie. tiktoken-go looks for that
// pair anew after every merge, which is quadratic in the piece's length
// (256 KiB of one letter took 47 s); the heap of bpe.go does the same
// merges in O(n log n).
type tiktokenBPE struct {
	ranks    map[string]int32 // a token's bytes → its id (its rank)
	bytes    [256]int32       // the token of each single byte
	model    bpeModel         // merges: a pair of tokens → the token of their bytes
	split    *regexp2.Regexp
	specials map[string]int32
}

// newTiktokenBPE loads encoding name's ranks (embedded, no network).
func newTiktokenBPE(name string, specials map[string]int32) (*tiktokenBPE, error) {
	raw, err := tiktokenloader.NewOfflineLoader().LoadTiktokenBpe("https://openaipublic.blob.core.windows.net/encodings/" + name + ".tiktoken")
	if err != nil {
		return nil, err
	}
	re, err := regexp2.Compile(tiktokenPatterns[name], regexp2.None)
	if err != nil {
		return nil, err
	}
	e := &tiktokenBPE{ranks: make(map[string]int32, len(raw)), split: re, specials: specials,
		model: bpeModel{merges: map[[2]int32]merge{}, unk: -1}}
	for tok, r := range raw {
		e.ranks[tok] = int32(r)
	}
	for b := range e.bytes {
		id, ok := e.ranks[string([]byte{byte(b)})]
		if !ok {
			return nil, fmt.Errorf("byte %#02x is not a token", b)
		}
		e.bytes[b] = id
	}
	for tok, r := range e.ranks {
		for k := 1; k < len(tok); k++ {
			if a, ok := e.ranks[tok[:k]]; ok {
				if b, ok := e.ranks[tok[k:]]; ok {
					e.model.merges[[2]int32{a, b}] = merge{rank: r, id: r}
				}
			}
		}
	}
	return e, nil
}

func (e *tiktokenBPE) encode(text string, plain map[rune]string) ([]int32, error) {
	var out []int32
	for text != "" {
		at, special := e.nextSpecial(text)
		part := text
		if special != "" {
			part = text[:at]
		}
		var err error
		if out, err = e.encodeOrdinary(out, unescape(part, plain)); err != nil {
			return nil, err
		}
		if special == "" {
			break
		}
		out = append(out, e.specials[special])
		text = text[at+len(special):]
	}
	return out, nil
}

// nextSpecial finds the leftmost special token in text ("" if none).
func (e *tiktokenBPE) nextSpecial(text string) (int, string) {
	at, found := len(text), ""
	for s := range e.specials {
		if i := strings.Index(text, s); i >= 0 && (i < at || i == at && len(s) > len(found)) {
			at, found = i, s
		}
	}
	return at, found
}

// encodeOrdinary appends the ids of text, which holds no special token.
func (e *tiktokenBPE) encodeOrdinary(dst []int32, text string) ([]int32, error) {
	m, err := e.split.FindStringMatch(text)
	for ; err == nil && m != nil; m, err = e.split.FindNextMatch(m) {
		piece := m.String()
		if id, ok := e.ranks[piece]; ok {
			dst = append(dst, id)
			continue
		}
		syms := make([]symbol, len(piece))
		for i := range syms {
			syms[i] = symbol{id: e.bytes[piece[i]], prev: i - 1, next: i + 1}
		}
		e.model.mergeAll(syms)
		for _, s := range syms {
			if !s.gone {
				dst = append(dst, s.id)
			}
		}
	}
	return dst, err
}
