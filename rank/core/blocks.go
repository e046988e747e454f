package core

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
)

// BlockID names one block of the KV cache. Every rank's worker keeps block
// i at the same place of its own pool (its share of the heads), so one
// decision of rank 0 names the same memory on every rank.
type BlockID uint32

// KVConfig is the KV cache rank 0 schedules: what the workers reported
// at their handshake (every rank the same), or what the synthetic
// executor models.
type KVConfig struct {
	// BlockSize is the tokens one block holds.
	BlockSize int
	// Blocks is the number of blocks in the pool.
	Blocks int
	// Watermark is the blocks admission leaves free, so that the running
	// sequences can grow a while before one must be preempted (vLLM keeps
	// 1% of the pool). Growth itself may use them.
	Watermark int
}

// Validate reports the first invalid field.
func (c KVConfig) Validate() error {
	switch {
	case c.BlockSize < 1 || c.BlockSize > 1<<16:
		return fmt.Errorf("KV BlockSize must be in [1, 65536], got %d", c.BlockSize)
	case c.Blocks < 1 || c.Blocks > 1<<30:
		return fmt.Errorf("KV Blocks must be in [1, 2^30], got %d", c.Blocks)
	case c.Watermark < 0 || c.Watermark >= c.Blocks:
		return fmt.Errorf("KV Watermark must be in [0, Blocks) = [0, %d), got %d", c.Blocks, c.Watermark)
	}
	return nil
}

// Need is the blocks that tokens tokens take.
func (c KVConfig) Need(tokens int) int { return (tokens + c.BlockSize - 1) / c.BlockSize }

// BlockHash names the content of a full block: its tokens and every token
// before it in the sequence, chained, so equal hashes mean equal KV.
type BlockHash [sha256.Size]byte

// HashBlock is the hash of a full block whose tokens are tokens, after a
// block whose hash is parent (the zero hash for a sequence's first block):
// SHA-256 of the parent, extra, then the tokens as little-endian int32.
// extra is whatever else changes the keys and values of those tokens (an
// adapter, multimodal inputs, a cache salt): nothing today, but a hash
// that left it out would share blocks between requests that must not.
func HashBlock(parent BlockHash, extra []byte, tokens []int32) BlockHash {
	h := sha256.New()
	h.Write(parent[:])
	h.Write(extra)
	var buf [4]byte
	for _, t := range tokens {
		binary.LittleEndian.PutUint32(buf[:], uint32(t))
		h.Write(buf[:])
	}
	var out BlockHash
	h.Sum(out[:0])
	return out
}

// HashTokens is the chained hashes of tokens' full blocks of bs tokens.
func HashTokens(tokens []int32, bs int, extra []byte) []BlockHash {
	out := make([]BlockHash, 0, len(tokens)/bs)
	var parent BlockHash
	for j := 0; (j+1)*bs <= len(tokens); j++ {
		parent = HashBlock(parent, extra, tokens[j*bs:(j+1)*bs])
		out = append(out, parent)
	}
	return out
}

// none is the end marker of the eviction queue's links.
const none = -1

// Blocks is rank 0's block manager: every sequence's block table, a
// reference count per block, so that sequences share blocks (a cached
// prefix), the cache of full blocks by content hash, and the eviction
// queue. It decides which blocks each sequence writes; it does no I/O.
//
// A block whose count drops to 0 is free. If it has a hash (its content
// is known and complete) it stays in the cache map, findable, until it is
// taken for another use: it is "cached free". Otherwise it is plainly
// free. The free blocks form one queue, a doubly linked list over block
// IDs so that a cached block found by a lookup leaves it in O(1):
// allocation takes from the head, plainly free blocks come first (oldest
// freed first), then the cached ones, least recently released first.
//
// Invariant (Check): a block's count is the number of tables that hold
// it; a block is in the queue exactly when its count is 0; the cache map
// and the blocks' hashes name each other.
type Blocks struct {
	cfg    KVConfig
	refs   []int32
	tables map[uint64][]BlockID
	// The queue: prev and next link the free blocks (none ends them),
	// head and tail are its ends, plain is its last plainly free block
	// (none if there is none), count its length.
	prev, next        []int32
	head, tail, plain int32
	count             int
	// The cache: hash[id] is block id's hash when hashed[id]; cache maps
	// each such hash back to its block.
	hash   []BlockHash
	hashed []bool
	cache  map[BlockHash]BlockID
}

// NewBlocks returns a pool with every block free.
func NewBlocks(cfg KVConfig) (*Blocks, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	n := cfg.Blocks
	b := &Blocks{
		cfg: cfg, refs: make([]int32, n), tables: map[uint64][]BlockID{},
		prev: make([]int32, n), next: make([]int32, n), head: none, tail: none, plain: none,
		hash: make([]BlockHash, n), hashed: make([]bool, n), cache: map[BlockHash]BlockID{},
	}
	for i := range n {
		b.pushPlain(BlockID(i))
	}
	return b, nil
}

// Config is the pool's configuration.
func (b *Blocks) Config() KVConfig { return b.cfg }

// Free counts the free blocks, cached ones included: any may be taken.
func (b *Blocks) Free() int { return b.count }

// Used counts the blocks some sequence holds.
func (b *Blocks) Used() int { return b.cfg.Blocks - b.Free() }

// Cached counts the blocks in the cache map, held or free.
func (b *Blocks) Cached() int { return len(b.cache) }

// Table is seq's block table: block i holds its tokens
// [i×BlockSize, (i+1)×BlockSize). The slice is the manager's; read it
// before the next change.
func (b *Blocks) Table(seq uint64) []BlockID { return b.tables[seq] }

// CanAdmit reports whether a new sequence of tokens tokens fits while
// leaving the watermark free.
func (b *Blocks) CanAdmit(tokens int) bool { return b.CanAdmitHit(nil, tokens) }

// CanAdmitHit reports whether a new sequence that shares hit and covers
// tokens tokens fits while leaving the watermark free: it takes the
// blocks past the hit, and the hit's cached free blocks leave the queue
// too.
func (b *Blocks) CanAdmitHit(hit []BlockID, tokens int) bool {
	n := b.cfg.Need(tokens) - len(hit)
	for _, id := range hit {
		if b.refs[id] == 0 {
			n++
		}
	}
	return n <= b.Free()-b.cfg.Watermark
}

// Grow makes seq's table cover tokens tokens and returns the blocks it
// added (none if it already did). If too few blocks are free it adds none
// and returns false: the caller frees some (preempts) and asks again. A
// cached free block taken leaves the cache (it is evicted).
func (b *Blocks) Grow(seq uint64, tokens int) ([]BlockID, bool) {
	t := b.tables[seq]
	add := b.cfg.Need(tokens) - len(t)
	if add <= 0 {
		return nil, true
	}
	if add > b.Free() {
		return nil, false
	}
	start := len(t)
	for range add {
		id := BlockID(b.head)
		b.unlink(id)
		b.evict(id)
		b.refs[id] = 1
		t = append(t, id)
	}
	b.tables[seq] = t
	return t[start:], true
}

// Lookup is the longest run of seq's first full blocks of tokens that
// the cache holds, and the tokens they cover, capped so that at least one
// token is left to compute (its logits are what the step samples).
func (b *Blocks) Lookup(tokens []int32, extra []byte) ([]BlockID, int) {
	return b.Match(HashTokens(tokens, b.cfg.BlockSize, extra), len(tokens))
}

// Match is Lookup for a sequence of length tokens whose full blocks'
// chained hashes are hashes.
func (b *Blocks) Match(hashes []BlockHash, length int) ([]BlockID, int) {
	var hit []BlockID
	for _, h := range hashes {
		id, ok := b.cache[h]
		if !ok {
			break
		}
		hit = append(hit, id)
	}
	for len(hit) > 0 && len(hit)*b.cfg.BlockSize >= length {
		hit = hit[:len(hit)-1]
	}
	return hit, len(hit) * b.cfg.BlockSize
}

// Cache records that block id, held by a sequence, is full and holds the
// content h names, so later sequences can share it. It returns false, and
// changes nothing, if the block is free or already hashed, or if another
// block already holds h (the first stays the one found).
func (b *Blocks) Cache(id BlockID, h BlockHash) bool {
	if int(id) >= len(b.refs) || b.refs[id] == 0 || b.hashed[id] {
		return false
	}
	if _, dup := b.cache[h]; dup {
		return false
	}
	b.hash[id], b.hashed[id] = h, true
	b.cache[h] = id
	return true
}

// Share starts seq's table with blocks that are held by other sequences
// or cached free (a lookup's hit), raising their counts; a cached free
// block leaves the queue. seq reads them and never writes them. seq must
// hold no blocks yet.
func (b *Blocks) Share(seq uint64, blocks []BlockID) error {
	if len(b.tables[seq]) != 0 {
		return fmt.Errorf("sequence %d already holds %d blocks", seq, len(b.tables[seq]))
	}
	for _, id := range blocks {
		if int(id) >= len(b.refs) || (b.refs[id] == 0 && !b.hashed[id]) {
			return fmt.Errorf("block %d is neither held by a sequence nor cached", id)
		}
	}
	for _, id := range blocks {
		if b.refs[id] == 0 {
			b.unlink(id)
		}
		b.refs[id]++
	}
	b.tables[seq] = slices.Clone(blocks)
	return nil
}

// Release drops seq's table: each of its blocks that no other sequence
// holds is freed, its last blocks first, so that a cached prefix's
// leaves are evicted before the blocks other sequences branch from.
func (b *Blocks) Release(seq uint64) {
	t := b.tables[seq]
	for i := len(t) - 1; i >= 0; i-- {
		id := t[i]
		if b.refs[id]--; b.refs[id] != 0 {
			continue
		}
		if b.hashed[id] {
			b.pushCached(id)
		} else {
			b.pushPlain(id)
		}
	}
	delete(b.tables, seq)
}

// evict drops block id's hash from the cache: it is about to be written.
func (b *Blocks) evict(id BlockID) {
	if b.hashed[id] {
		delete(b.cache, b.hash[id])
		b.hashed[id] = false
		b.hash[id] = BlockHash{}
	}
}

// pushPlain queues a plainly free block after the other plainly free
// ones, ahead of every cached one: it holds nothing worth keeping.
func (b *Blocks) pushPlain(id BlockID) {
	after := b.plain
	b.plain = int32(id)
	b.link(int32(id), after)
}

// pushCached queues a cached free block last: evicted after every block
// freed before it.
func (b *Blocks) pushCached(id BlockID) { b.link(int32(id), b.tail) }

// link inserts block id into the queue after block after (none: at the
// head).
func (b *Blocks) link(id, after int32) {
	nx := b.head
	if after != none {
		nx = b.next[after]
		b.next[after] = id
	} else {
		b.head = id
	}
	b.prev[id], b.next[id] = after, nx
	if nx != none {
		b.prev[nx] = id
	} else {
		b.tail = id
	}
	b.count++
}

// unlink takes block id out of the queue, wherever it is.
func (b *Blocks) unlink(id BlockID) {
	i := int32(id)
	p, nx := b.prev[i], b.next[i]
	if p != none {
		b.next[p] = nx
	} else {
		b.head = nx
	}
	if nx != none {
		b.prev[nx] = p
	} else {
		b.tail = p
	}
	if b.plain == i {
		b.plain = p // the blocks before a plainly free one are plainly free too
	}
	b.prev[i], b.next[i] = none, none
	b.count--
}
