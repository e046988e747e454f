package tokenizer

import (
	"fmt"
	"maps"
	"slices"

	"github.com/pkoukk/tiktoken-go"
)

// tiktokenEncoding is what this package needs to know of an encoding
// beyond its ranks (tiktokenBPE loads those): its size and its special
// tokens.
type tiktokenEncoding struct {
	vocabSize int
	specials  map[string]int32
	eos       string
}

var tiktokenEncodings = map[string]tiktokenEncoding{
	"cl100k_base": {100277, map[string]int32{tiktoken.ENDOFTEXT: 100257, tiktoken.FIM_PREFIX: 100258,
		tiktoken.FIM_MIDDLE: 100259, tiktoken.FIM_SUFFIX: 100260, tiktoken.ENDOFPROMPT: 100276}, tiktoken.ENDOFTEXT},
	"o200k_base": {200019, map[string]int32{tiktoken.ENDOFTEXT: 199999, tiktoken.ENDOFPROMPT: 200018}, tiktoken.ENDOFTEXT},
	"p50k_base":  {50281, map[string]int32{tiktoken.ENDOFTEXT: 50256}, tiktoken.ENDOFTEXT},
	"r50k_base":  {50257, map[string]int32{tiktoken.ENDOFTEXT: 50256}, tiktoken.ENDOFTEXT},
}

func loadTiktoken(name string) (*Tokenizer, error) {
	info, ok := tiktokenEncodings[name]
	if !ok {
		return nil, fmt.Errorf("tokenizer: tiktoken:%s: unknown encoding (known: cl100k_base, o200k_base, p50k_base, r50k_base)", name)
	}
	enc, err := newTiktokenBPE(name, info.specials)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: tiktoken:%s: %w", name, err)
	}
	t := &Tokenizer{
		name:    "tiktoken:" + name,
		enc:     enc,
		pieces:  make([][]byte, info.vocabSize),
		special: make([]bool, info.vocabSize),
	}
	// A token's piece is its bytes; ids no token has (cl100k_base has
	// gaps below its specials) decode to nothing.
	for tok, id := range enc.ranks {
		if int(id) >= len(t.pieces) {
			return nil, fmt.Errorf("tokenizer: tiktoken:%s: token id %d is beyond the vocab (%d)", name, id, len(t.pieces))
		}
		t.pieces[id] = []byte(tok)
	}
	for tok, id := range info.specials {
		t.pieces[id], t.special[id] = []byte(tok), true
	}
	t.eos, t.hasEOS = info.specials[info.eos], true
	t.specials = newSpecialSet(slices.Collect(maps.Keys(info.specials)))
	return t, nil
}

// encode maps special tokens written in the text to their ids, as
// tokenizer.json tokenizers do, rather than refusing them as tiktoken's
// default does.
