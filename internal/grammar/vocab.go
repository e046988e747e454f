package grammar

import (
	"bytes"
	"slices"
)

// Vocab is a tokenizer's vocabulary as bytes: pieces[id] is the bytes that
// token id decodes to. It holds the pieces in a byte trie laid out in
// depth-first order, so that computing a mask is one pass over arrays that
// skips every subtree the grammar rules out. It is immutable and safe for
// concurrent use.
type Vocab struct {
	pieces  [][]byte
	special []bool

	// The trie, node i in preorder (the root is implicit): the byte on the
	// edge into it, its depth (1 for a child of the root), skip[i] the node
	// after its subtree, and toks[tokAt[i]:tokAt[i+1]] the tokens whose
	// pieces end at it.
	nodeByte []byte
	depth    []int32
	skip     []int32
	tokAt    []int32
	toks     []int32
	maxDepth int
}

// NewVocab builds the trie of a vocabulary: pieces[id] is the bytes token
// id decodes to; special[id] tokens (and empty pieces) are never allowed
// by a mask. special may be shorter than pieces (missing entries are
// false). The pieces are kept, not copied: do not change them after.
func NewVocab(pieces [][]byte, special []bool) *Vocab {
	v := &Vocab{pieces: pieces, special: make([]bool, len(pieces))}
	copy(v.special, special)
	var ids []int32
	for id := range pieces {
		if v.eligible(int32(id)) {
			ids = append(ids, int32(id))
		}
	}
	slices.SortStableFunc(ids, func(a, b int32) int { return bytes.Compare(pieces[a], pieces[b]) })
	var prev []byte
	for i, id := range ids {
		p := pieces[id]
		if i > 0 && bytes.Equal(p, prev) {
			v.toks = append(v.toks, id) // same node as prev, the last made
			continue
		}
		for k := commonPrefix(p, prev); k < len(p); k++ {
			v.nodeByte = append(v.nodeByte, p[k])
			v.depth = append(v.depth, int32(k+1))
			v.tokAt = append(v.tokAt, int32(len(v.toks)))
		}
		v.toks = append(v.toks, id)
		v.maxDepth = max(v.maxDepth, len(p))
		prev = p
	}
	v.tokAt = append(v.tokAt, int32(len(v.toks)))
	v.skip = skips(v.depth)
	return v
}

// skips returns, for each node of a preorder with these depths, the index
// of the first node after its subtree.
func skips(depth []int32) []int32 {
	skip := make([]int32, len(depth))
	var open []int32
	for i, d := range depth {
		for len(open) > 0 && depth[open[len(open)-1]] >= d {
			skip[open[len(open)-1]] = int32(i)
			open = open[:len(open)-1]
		}
		open = append(open, int32(i))
	}
	for _, o := range open {
		skip[o] = int32(len(depth))
	}
	return skip
}

func commonPrefix(a, b []byte) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// Size is the number of token ids.
func (v *Vocab) Size() int { return len(v.pieces) }

// Piece returns the bytes of token id (nil if out of range). The slice is
// the vocabulary's own: do not change it.
func (v *Vocab) Piece(id int32) []byte {
	if id < 0 || int(id) >= len(v.pieces) {
		return nil
	}
	return v.pieces[id]
}

// eligible reports whether a mask may allow token id: not special, not
// empty.
func (v *Vocab) eligible(id int32) bool {
	return !v.special[id] && len(v.pieces[id]) > 0
}

// words is the length of a mask.
func (v *Vocab) words() int { return (len(v.pieces) + 63) / 64 }
