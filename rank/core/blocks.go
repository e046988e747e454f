package core

import (
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

// Blocks is rank 0's block manager: the free list, every sequence's block
// table, and a reference count per block, so that sequences can share
// blocks (a prompt's blocks shared by its n choices, a cached prefix).
// It decides which blocks each sequence writes; it does no I/O.
//
// Invariant (Check): a block's count is the number of tables that hold
// it, and a block is on the free list exactly when its count is 0.
type Blocks struct {
	cfg    KVConfig
	refs   []int32
	free   []BlockID // a FIFO: the least recently freed is reused first
	head   int       // free[head:] are the free blocks
	tables map[uint64][]BlockID
}

// NewBlocks returns a pool with every block free.
func NewBlocks(cfg KVConfig) (*Blocks, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	b := &Blocks{cfg: cfg, refs: make([]int32, cfg.Blocks), free: make([]BlockID, cfg.Blocks), tables: map[uint64][]BlockID{}}
	for i := range b.free {
		b.free[i] = BlockID(i)
	}
	return b, nil
}

// Config is the pool's configuration.
func (b *Blocks) Config() KVConfig { return b.cfg }

// Free counts the free blocks.
func (b *Blocks) Free() int { return len(b.free) - b.head }

// Used counts the blocks some sequence holds.
func (b *Blocks) Used() int { return b.cfg.Blocks - b.Free() }

// Table is seq's block table: block i holds its tokens
// [i×BlockSize, (i+1)×BlockSize). The slice is the manager's; read it
// before the next change.
func (b *Blocks) Table(seq uint64) []BlockID { return b.tables[seq] }

// CanAdmit reports whether a new sequence of tokens tokens fits while
// leaving the watermark free.
func (b *Blocks) CanAdmit(tokens int) bool {
	return b.cfg.Need(tokens) <= b.Free()-b.cfg.Watermark
}

// Grow makes seq's table cover tokens tokens and returns the blocks it
// added (none if it already did). If too few blocks are free it adds none
// and returns false: the caller frees some (preempts) and asks again.
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
		id := b.free[b.head]
		b.head++
		b.refs[id] = 1
		t = append(t, id)
	}
	b.compact()
	b.tables[seq] = t
	return t[start:], true
}

// Share starts seq's table with blocks another sequence holds (raising
// their counts): seq reads them and never writes them. seq must hold no
// blocks yet.
func (b *Blocks) Share(seq uint64, blocks []BlockID) error {
	if len(b.tables[seq]) != 0 {
		return fmt.Errorf("sequence %d already holds %d blocks", seq, len(b.tables[seq]))
	}
	for _, id := range blocks {
		if int(id) >= len(b.refs) || b.refs[id] == 0 {
			return fmt.Errorf("block %d is not held by any sequence", id)
		}
	}
	for _, id := range blocks {
		b.refs[id]++
	}
	b.tables[seq] = slices.Clone(blocks)
	return nil
}

// Release drops seq's table: each of its blocks that no other sequence
// holds goes back to the free list.
func (b *Blocks) Release(seq uint64) {
	for _, id := range b.tables[seq] {
		if b.refs[id]--; b.refs[id] == 0 {
			b.free = append(b.free, id)
		}
	}
	delete(b.tables, seq)
}

// compact moves the free list to the front of its array once half of it
// is taken, so the array never grows past twice the pool.
func (b *Blocks) compact() {
	if b.head > len(b.free)/2 {
		b.free = append(b.free[:0], b.free[b.head:]...)
		b.head = 0
	}
}

// Check verifies the invariant: every count equals the tables holding
// the block, and the free list holds exactly the blocks whose count is 0,
// each once. It is for tests (it walks the whole pool).
func (b *Blocks) Check() error {
	held := make([]int32, len(b.refs))
	for seq, t := range b.tables {
		for _, id := range t {
			if int(id) >= len(held) {
				return fmt.Errorf("sequence %d holds block %d of a pool of %d", seq, id, len(held))
			}
			held[id]++
		}
	}
	onFree := make([]bool, len(b.refs))
	for _, id := range b.free[b.head:] {
		if onFree[id] {
			return fmt.Errorf("block %d is on the free list twice", id)
		}
		onFree[id] = true
	}
	for id := range b.refs {
		switch {
		case b.refs[id] != held[id]:
			return fmt.Errorf("block %d: count %d, held by %d tables", id, b.refs[id], held[id])
		case (b.refs[id] == 0) != onFree[id]:
			return fmt.Errorf("block %d: count %d, on the free list %v", id, b.refs[id], onFree[id])
		}
	}
	return nil
}
