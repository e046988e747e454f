package core

import (
	"encoding/hex"
	"slices"
	"testing"
)

// TestHashChaining: a block's hash depends on its tokens, on every block
// before it and on extra, and on nothing else: the same tokens hash the
// same, a different earlier block changes every later hash, and so does
// another extra. Only full blocks are hashed.
func TestHashChaining(t *testing.T) {
	a := []int32{1, 2, 3, 4, 5, 6, 7, 8, 9}
	h := HashTokens(a, 2, nil)
	if len(h) != 4 {
		t.Fatalf("9 tokens in blocks of 2: %d hashes, want 4 (the last block is not full)", len(h))
	}
	if again := HashTokens(slices.Clone(a), 2, nil); !slices.Equal(again, h) {
		t.Fatal("the same tokens hash differently")
	}
	b := slices.Clone(a)
	b[0] = 100
	hb := HashTokens(b, 2, nil)
	for j := range h {
		if hb[j] == h[j] {
			t.Errorf("block %d: the same hash after block 0 changed", j)
		}
	}
	c := slices.Clone(a)
	c[7] = 100 // block 3
	if hc := HashTokens(c, 2, nil); !slices.Equal(hc[:3], h[:3]) || hc[3] == h[3] {
		t.Errorf("a change in block 3 must change its hash alone")
	}
	he := HashTokens(a, 2, []byte("salt"))
	for j := range h {
		if he[j] == h[j] {
			t.Errorf("block %d: the same hash with another extra", j)
		}
	}
	if HashBlock(BlockHash{}, nil, a[:2]) != h[0] {
		t.Error("the first block's parent is not the zero hash")
	}
	// SHA-256 of 32 zero bytes then 1, 2 as little-endian int32.
	const want = "e7ca17d6581d126af7e0c8574cdd8987ed93319969b54a5e2a272d585a38f3ea"
	if got := hex.EncodeToString(h[0][:]); got != want {
		t.Errorf("hash of block [1 2]: %s, want %s", got, want)
	}
}

// cachedSeq grows seq to cover tokens and registers its full blocks, as
// the scheduler does once their forward pass has run.
func cachedSeq(t *testing.T, b *Blocks, seq uint64, tokens []int32) {
	t.Helper()
	if _, ok := b.Grow(seq, len(tokens)); !ok {
		t.Fatalf("sequence %d: no blocks", seq)
	}
	for j, h := range HashTokens(tokens, b.Config().BlockSize, nil) {
		if !b.Cache(b.Table(seq)[j], h) {
			t.Fatalf("sequence %d block %d not cached", seq, j)
		}
	}
}

// TestBlocksEvictionOrder: allocation takes plainly free blocks before
// cached ones; among cached ones, the least recently released sequence's
// first, and within a sequence its last blocks (the leaves) first. A block
// taken leaves the cache.
func TestBlocksEvictionOrder(t *testing.T) {
	b := mustBlocks(t, KVConfig{BlockSize: 2, Blocks: 10})
	x := []int32{1, 2, 3, 4, 5, 6}
	y := []int32{7, 8, 9, 10}
	cachedSeq(t, b, 1, x) // blocks 0 1 2
	cachedSeq(t, b, 2, y) // blocks 3 4
	b.Grow(3, 3)          // blocks 5 6, plain
	check(t, b)
	b.Release(1)
	b.Release(3)
	b.Release(2)
	check(t, b)
	want := []BlockID{7, 8, 9, 6, 5, 2, 1, 0, 4, 3}
	if got := queue(b); !slices.Equal(got, want) {
		t.Fatalf("queue %v, want %v: plain first, then sequence 1's blocks leaves first, then sequence 2's", got, want)
	}
	if hit, n := b.Lookup(append(slices.Clone(x), 0), nil); !slices.Equal(hit, []BlockID{0, 1, 2}) || n != 6 {
		t.Fatalf("lookup after release: %v %d", hit, n)
	}
	add, _ := b.Grow(4, 12) // six blocks: five plain, then block 2 evicted
	if !slices.Equal(add, []BlockID{7, 8, 9, 6, 5, 2}) {
		t.Fatalf("grew %v", add)
	}
	if hit, n := b.Lookup(append(slices.Clone(x), 0), nil); !slices.Equal(hit, []BlockID{0, 1}) || n != 4 || b.Cached() != 4 {
		t.Fatalf("after evicting block 2: lookup %v %d, %d cached; want 0 1 still found", hit, n, b.Cached())
	}
	b.Grow(4, 16) // two more: 1 then 0, sequence 1's rest, before sequence 2's
	if hit, _ := b.Lookup(append(slices.Clone(y), 0), nil); !slices.Equal(hit, []BlockID{3, 4}) || b.Cached() != 2 {
		t.Fatalf("sequence 2's blocks: lookup %v, %d cached; want them kept (released later)", hit, b.Cached())
	}
	check(t, b)
}

// TestBlocksLookupCap: a hit leaves at least one token to compute, so a
// sequence whose tokens are all cached shares all its blocks but the last.
func TestBlocksLookupCap(t *testing.T) {
	b := mustBlocks(t, KVConfig{BlockSize: 2, Blocks: 8})
	x := []int32{1, 2, 3, 4, 5, 6}
	cachedSeq(t, b, 1, x)
	for _, tc := range []struct {
		tokens []int32
		hit    int
	}{
		{x, 2},                // whole: the last block is computed again
		{x[:5], 2},            // 5 tokens: blocks 0 1, the fifth computed
		{x[:4], 1},            // 4 tokens, both blocks cached: one kept
		{x[:2], 0},            // one block: nothing
		{[]int32{1, 2, 9}, 1}, // diverges in block 1
		{[]int32{9, 2, 3, 4}, 0},
	} {
		hit, n := b.Lookup(tc.tokens, nil)
		if len(hit) != tc.hit || n != 2*tc.hit || n >= len(tc.tokens) && n > 0 {
			t.Errorf("lookup %v: %v, %d tokens; want %d blocks", tc.tokens, hit, n, tc.hit)
		}
	}
}

// TestBlocksShareCached: sharing raises counts and takes cached free
// blocks out of the queue; no block is freed, or evicted, while a table
// holds it; a plainly free block cannot be shared.
func TestBlocksShareCached(t *testing.T) {
	b := mustBlocks(t, KVConfig{BlockSize: 2, Blocks: 6})
	x := []int32{1, 2, 3, 4, 5}
	cachedSeq(t, b, 1, x) // blocks 0 1 cached, 2 partial
	if err := b.Share(2, []BlockID{0, 1}); err != nil {
		t.Fatal(err)
	}
	b.Release(1) // 0 and 1 still held by 2; 2 plainly free
	if b.refs[0] != 1 || b.refs[1] != 1 || slices.Contains(queue(b), 0) || slices.Contains(queue(b), 1) || b.Cached() != 2 {
		t.Fatalf("counts %v, queue %v, %d cached", b.refs, queue(b), b.Cached())
	}
	if err := b.Share(3, []BlockID{2}); err == nil {
		t.Fatal("shared a plainly free block")
	}
	b.Release(2) // both cached free now
	if err := b.Share(4, []BlockID{0, 1}); err != nil || b.Free() != 4 || b.refs[0] != 1 {
		t.Fatalf("share of cached free blocks: %v, %d free, counts %v", err, b.Free(), b.refs)
	}
	check(t, b)
	if add, ok := b.Grow(5, 9); ok || add != nil {
		t.Fatalf("grew %v into held blocks", add)
	}
	b.Grow(5, 8) // every free block
	if hit, _ := b.Lookup(x, nil); !slices.Equal(hit, []BlockID{0, 1}) || !slices.Equal(b.Table(4), []BlockID{0, 1}) {
		t.Fatalf("a held cached block was evicted: lookup %v, table %v", hit, b.Table(4))
	}
	check(t, b)
	b.Release(4)
	b.Release(5)
	if b.Used() != 0 || b.Free() != 6 {
		t.Fatalf("%d used, %d free at the end", b.Used(), b.Free())
	}
	check(t, b)
}

// TestBlocksCacheDuplicate: a second block with a hash already cached
// stays uncached (the first is the one found) and is freed plainly.
func TestBlocksCacheDuplicate(t *testing.T) {
	b := mustBlocks(t, KVConfig{BlockSize: 2, Blocks: 5})
	x := []int32{1, 2, 3}
	cachedSeq(t, b, 1, x)
	b.Grow(2, 3)
	h := HashTokens(x, 2, nil)[0]
	if b.Cache(b.Table(2)[0], h) || b.Cache(b.Table(1)[0], h) {
		t.Fatal("cached a duplicate, or a block twice")
	}
	if b.Cache(4, h) {
		t.Fatal("cached a free block")
	}
	b.Release(2)
	if q := queue(b); !slices.Equal(q, []BlockID{4, 3, 2}) {
		t.Fatalf("queue %v: sequence 2's blocks are plainly free", q)
	}
	check(t, b)
}

// TestBlocksCheckCatchesCache: the invariant check finds a cache map
// that lost a block, and a cached block queued among the plain ones.
func TestBlocksCheckCatchesCache(t *testing.T) {
	b := mustBlocks(t, KVConfig{BlockSize: 2, Blocks: 4})
	cachedSeq(t, b, 1, []int32{1, 2})
	delete(b.cache, b.hash[0])
	if b.Check() == nil {
		t.Fatal("a hashed block missing from the map passed")
	}
	b = mustBlocks(t, KVConfig{BlockSize: 2, Blocks: 4})
	b.Grow(1, 2)
	b.Release(1)
	b.hashed[0] = true // now queued first, as a cached block, before plain ones
	b.cache[b.hash[0]] = 0
	if b.Check() == nil {
		t.Fatal("a cached block before plain ones passed")
	}
}
