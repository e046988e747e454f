package tokenizer

import (
	"fmt"
	"sync"

	"github.com/pkoukk/tiktoken-go"
	tiktokenloader "github.com/pkoukk/tiktoken-go-loader"
)

// tiktokenEncoding is what this package needs to know of an encoding
// beyond what tiktoken-go exposes: its size and its special tokens.
type tiktokenEncoding struct {
	vocabSize int
	specials  map[string]int32
	eos       string
}

var tiktokenEncodings = map[string]tiktokenEncoding{
	"cl100k_base": {100277, map[string]int32{tiktoken.ENDOFTEXT: 100257, tiktoken.FIM_PREFIX: 100258,
		tiktoken.FIM_MIDDLE: 100259, tiktoken.FIM_SUFFIX: 100260, tiktoken.ENDOFPROMPT: 100276}, tiktoken.ENDOFTEXT},
	"o200k_base": {200019, map[string]int32{tiktoken.ENDOFTEXT: 199999, tiktoken.ENDOFPROMPT: 200018}, tiktoken.ENDOFTEXT},
	"p50k_base":  {50257, map[string]int32{tiktoken.ENDOFTEXT: 50256}, tiktoken.ENDOFTEXT},
	"r50k_base":  {50257, map[string]int32{tiktoken.ENDOFTEXT: 50256}, tiktoken.ENDOFTEXT},
}

// offlineOnce installs the embedded encodings: tiktoken-go otherwise
// downloads them, and its loader is a process-wide setting.
var offlineOnce sync.Once

func loadTiktoken(name string) (*Tokenizer, error) {
	info, ok := tiktokenEncodings[name]
	if !ok {
		return nil, fmt.Errorf("tokenizer: tiktoken:%s: unknown encoding (known: cl100k_base, o200k_base, p50k_base, r50k_base)", name)
	}
	offlineOnce.Do(func() { tiktoken.SetBpeLoader(tiktokenloader.NewOfflineLoader()) })
	tk, err := tiktoken.GetEncoding(name)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: tiktoken:%s: %w", name, err)
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
	one := []int{0}
	for id := range t.pieces {
		one[0] = id
		t.pieces[id] = []byte(tk.Decode(one))
	}
	for _, id := range info.specials {
		t.special[id] = true
	}
	t.eos, t.hasEOS = info.specials[info.eos], true
	return t, nil
}

// encode maps special tokens written in the text to their ids, as
// tokenizer.json tokenizers do, rather than refusing them as tiktoken's
// default does.
