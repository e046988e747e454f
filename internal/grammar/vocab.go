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

	// The trie in preorder (the root is implicit).
	nodes []trieNode
	// multi[k] are the tokens of a node whose tok is -2-k (pieces that
	// several tokens share).
	multi    [][]int32
	maxDepth int
}

// trieNode is one node of the vocabulary's trie, in one struct so that a
// mask walk reads one array in order.
type trieNode struct {
	skip  int32 // the node after this one's subtree
	tok   int32 // the token whose piece ends here; -1 none; -2-k: multi[k]
	depth int32 // 1 for a child of the root
	b     byte  // the byte on the edge into the node
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
			v.addDuplicate(id) // same node as prev, the last made
			continue
		}
		for k := commonPrefix(p, prev); k < len(p); k++ {
			v.nodes = append(v.nodes, trieNode{tok: -1, depth: int32(k + 1), b: p[k]})
		}
		v.nodes[len(v.nodes)-1].tok = id
		v.maxDepth = max(v.maxDepth, len(p))
		prev = p
	}
	v.setSkips()
	return v
}

// addDuplicate adds token id to the last node made.
func (v *Vocab) addDuplicate(id int32) {
	n := &v.nodes[len(v.nodes)-1]
	if n.tok >= 0 {
		v.multi = append(v.multi, []int32{n.tok})
		n.tok = int32(-1 - len(v.multi))
	}
	k := -2 - n.tok
	v.multi[k] = append(v.multi[k], id)
}

// setSkips sets each node's skip to the index of the first node after its
// subtree.
func (v *Vocab) setSkips() {
	var open []int32
	for i, n := range v.nodes {
		for len(open) > 0 && v.nodes[open[len(open)-1]].depth >= n.depth {
			v.nodes[open[len(open)-1]].skip = int32(i)
			open = open[:len(open)-1]
		}
		open = append(open, int32(i))
	}
	for _, o := range open {
		v.nodes[o].skip = int32(len(v.nodes))
	}
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
