package tokenizer

import (
	"container/heap"
	"unicode/utf8"
)

// bpeModel is a Hugging Face BPE model: merges applied by the rank of the
// pair, lowest first, as the tokenizers library does (not by the rank of
// the merged token, as tiktoken does).
type bpeModel struct {
	vocab  map[string]int32
	merges map[[2]int32]merge
	// byteFallback maps a byte to its <0xHH> token, or -1; used only when
	// the model has byte_fallback and a character is not in the vocab.
	byteFallback [256]int32
	hasFallback  bool
	unk          int32 // -1 without an unk_token
	// ignoreMerges: a word that is itself in the vocab is one token.
	ignoreMerges bool
}

type merge struct{ rank, id int32 }

// symbol is one element of a word being merged, in a doubly linked list
// over the word's slice; gone marks a symbol merged into its left.
type symbol struct {
	id         int32
	prev, next int
	gone       bool
}

// candidate is a possible merge of symbols[left] with its next symbol;
// it is stale if either has changed since it was queued.
type candidate struct {
	rank, id   int32
	left       int
	leftID     int32
	rightIndex int
	rightID    int32
}

type candidates []candidate

func (c candidates) Len() int { return len(c) }
func (c candidates) Less(i, j int) bool {
	if c[i].rank != c[j].rank {
		return c[i].rank < c[j].rank
	}
	return c[i].left < c[j].left
}
func (c candidates) Swap(i, j int) { c[i], c[j] = c[j], c[i] }
func (c *candidates) Push(x any)   { *c = append(*c, x.(candidate)) }
func (c *candidates) Pop() any {
	old := *c
	x := old[len(old)-1]
	*c = old[:len(old)-1]
	return x
}

// encodeWord appends the ids of one pre-tokenized word. A heap keeps it
// O(n log n) in the word's length: a SentencePiece-style tokenizer with no
// pre-tokenizer hands the whole text over as one word.
func (m *bpeModel) encodeWord(dst []int32, word string) []int32 {
	if word == "" {
		return dst
	}
	if m.ignoreMerges {
		if id, ok := m.vocab[word]; ok {
			return append(dst, id)
		}
	}
	syms := m.initialSymbols(word)
	if len(syms) > 1 {
		m.mergeAll(syms)
	}
	for _, s := range syms {
		if !s.gone {
			dst = append(dst, s.id)
		}
	}
	return dst
}

// initialSymbols is one symbol per character, or per byte of a character
// missing from the vocab when the model falls back to bytes; a character
// with neither is the unk token, or dropped as the tokenizers library does.
func (m *bpeModel) initialSymbols(word string) []symbol {
	syms := make([]symbol, 0, len(word))
	add := func(id int32) {
		n := len(syms)
		syms = append(syms, symbol{id: id, prev: n - 1, next: n + 1})
	}
	for i := 0; i < len(word); {
		_, n := utf8.DecodeRuneInString(word[i:])
		ch := word[i : i+n]
		i += n
		if id, ok := m.vocab[ch]; ok {
			add(id)
			continue
		}
		if m.hasFallback && m.fallbackAll(ch) {
			for j := 0; j < len(ch); j++ {
				add(m.byteFallback[ch[j]])
			}
			continue
		}
		if m.unk >= 0 {
			add(m.unk)
		}
	}
	return syms
}

func (m *bpeModel) fallbackAll(ch string) bool {
	for j := 0; j < len(ch); j++ {
		if m.byteFallback[ch[j]] < 0 {
			return false
		}
	}
	return true
}

func (m *bpeModel) mergeAll(syms []symbol) {
	var q candidates
	push := func(left int) {
		right := syms[left].next
		if right >= len(syms) {
			return
		}
		if mg, ok := m.merges[[2]int32{syms[left].id, syms[right].id}]; ok {
			heap.Push(&q, candidate{rank: mg.rank, id: mg.id, left: left,
				leftID: syms[left].id, rightIndex: right, rightID: syms[right].id})
		}
	}
	for i := 0; i+1 < len(syms); i++ {
		push(i)
	}
	for q.Len() > 0 {
		c := heap.Pop(&q).(candidate)
		l, r := c.left, c.rightIndex
		if syms[l].gone || syms[r].gone || syms[l].next != r ||
			syms[l].id != c.leftID || syms[r].id != c.rightID {
			continue // stale: one side merged since this was queued
		}
		syms[l].id = c.id
		syms[r].gone = true
		syms[l].next = syms[r].next
		if syms[r].next < len(syms) {
			syms[syms[r].next].prev = l
		}
		if syms[l].prev >= 0 {
			push(syms[l].prev)
		}
		push(l)
	}
}
