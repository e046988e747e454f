package core

import "fmt"

// Check verifies the invariant: every count equals the tables holding
// the block; the queue's links agree both ways and hold exactly the
// blocks whose count is 0, each once, the plainly free ones first; and
// the cache map and the blocks' hashes name each other. It is for tests
// (it walks the whole pool).
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
	queued, err := b.checkQueue()
	if err != nil {
		return err
	}
	for id := range b.refs {
		switch {
		case b.refs[id] != held[id]:
			return fmt.Errorf("block %d: count %d, held by %d tables", id, b.refs[id], held[id])
		case (b.refs[id] == 0) != queued[id]:
			return fmt.Errorf("block %d: count %d, in the free queue %v", id, b.refs[id], queued[id])
		}
	}
	return b.checkCache()
}

// checkQueue walks the queue from its head and returns which blocks it
// holds.
func (b *Blocks) checkQueue() ([]bool, error) {
	queued := make([]bool, len(b.refs))
	n, prev, lastPlain, cachedSeen := 0, int32(none), int32(none), false
	for id := b.head; id != none; id = b.next[id] {
		switch {
		case n >= len(b.refs) || queued[id]:
			return nil, fmt.Errorf("the free queue loops at block %d", id)
		case b.prev[id] != prev:
			return nil, fmt.Errorf("block %d: the free queue links back to %d, it follows %d", id, b.prev[id], prev)
		case b.hashed[id]:
			cachedSeen = true
		case cachedSeen:
			return nil, fmt.Errorf("plainly free block %d is queued after a cached one", id)
		default:
			lastPlain = id
		}
		queued[id] = true
		prev = id
		n++
	}
	switch {
	case prev != b.tail:
		return nil, fmt.Errorf("the free queue ends at %d, its tail says %d", prev, b.tail)
	case n != b.count:
		return nil, fmt.Errorf("the free queue holds %d blocks, its count says %d", n, b.count)
	case lastPlain != b.plain:
		return nil, fmt.Errorf("the last plainly free block is %d, the queue says %d", lastPlain, b.plain)
	}
	return queued, nil
}

// checkCache checks that the cache map names exactly the hashed blocks.
func (b *Blocks) checkCache() error {
	n := 0
	for id, ok := range b.hashed {
		if !ok {
			continue
		}
		n++
		if got, in := b.cache[b.hash[id]]; !in || got != BlockID(id) {
			return fmt.Errorf("block %d is hashed %x, the cache maps that hash to block %d (present %v)", id, b.hash[id][:4], got, in)
		}
	}
	if n != len(b.cache) {
		return fmt.Errorf("the cache maps %d hashes, %d blocks are hashed", len(b.cache), n)
	}
	return nil
}
