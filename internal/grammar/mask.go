package grammar

import (
	"container/list"
	"sync"
)

// Tokens binds an automaton to a vocabulary: it holds the interned matcher
// states with their memoized transitions, and a cache of masks per state
// bounded by cacheBytes (least recently used masks are evicted first).
// Safe for concurrent use by many matchers: one mutex guards it.
type Tokens struct {
	a          *Automaton
	v          *Vocab
	cacheBytes int

	mu      sync.Mutex
	tab     *tables
	scratch []int32 // mask walk: the set at each trie depth
	resets  int
}

// NewTokens binds automaton a to vocabulary v, caching masks in at most
// cacheBytes bytes (each mask is 8 * ceil(v.Size()/64) bytes; 0 caches
// none).
func NewTokens(a *Automaton, v *Vocab, cacheBytes int) *Tokens {
	t := &Tokens{a: a, v: v, cacheBytes: max(cacheBytes, 0), scratch: make([]int32, v.maxDepth+1)}
	t.tab = t.newTables()
	return t
}

// Vocab returns the vocabulary of t.
func (t *Tokens) Vocab() *Vocab { return t.v }

func (t *Tokens) newTables() *tables {
	tab := newTables(t.a)
	tab.masks.init(t.cacheBytes / (8 * max(t.v.words(), 1)))
	return tab
}

// current returns the tables in use; t.mu is held.
func (t *Tokens) current() *tables { return t.tab }

// afterStep starts new tables once the current ones exceed
// Limits.MaxTableBytes; matchers move over on their next call. t.mu is
// held.
func (t *Tokens) afterStep() {
	if t.tab.bytes > t.a.lim.MaxTableBytes {
		t.tab = t.newTables()
		t.resets++
	}
}

// Allowed returns the tokens that may come next, as a bitset: bit id%64 of
// word id/64, ceil(Vocab.Size()/64) words. A token is allowed iff its
// whole byte string can be consumed from here (it need not complete the
// output). Special and empty tokens are never allowed; the caller adds
// EOS itself when CanEnd. The slice is read-only and may be shared with
// the cache and other matchers.
func (m *Matcher) Allowed() []uint64 {
	t := m.t
	t.mu.Lock()
	defer t.mu.Unlock()
	tab := m.sync()
	if mask, ok := tab.masks.get(m.set); ok {
		return mask
	}
	mask := t.computeMask(tab, m.set)
	tab.masks.put(m.set, mask)
	t.afterStep()
	return mask
}

// computeMask walks the vocabulary's trie from set s, one byte per node
// through the memoized transitions, skipping the subtree under any byte
// that leads nowhere (or to a limit).
func (t *Tokens) computeMask(tab *tables, s int32) []uint64 {
	v := t.v
	mask := make([]uint64, v.words())
	if s == deadSet {
		return mask
	}
	at := t.scratch
	at[0] = s
	nodes := v.nodes
	for i := 0; i < len(nodes); {
		n := &nodes[i]
		cur := at[n.depth-1]
		var next int32
		if m := tab.next[cur]; m != nil && m[n.b] > 0 { // step's fast path, inlined
			next = m[n.b] - 1
		} else {
			next = tab.step(cur, n.b)
		}
		if next <= deadSet {
			i = int(n.skip)
			continue
		}
		at[n.depth] = next
		if id := n.tok; id >= 0 {
			mask[id>>6] |= 1 << (id & 63)
		} else if id < -1 {
			for _, id := range v.multi[-2-id] {
				mask[id>>6] |= 1 << (id & 63)
			}
		}
		i++
	}
	return mask
}

// maskCache is a least-recently-used cache of masks by set id, holding at
// most cap masks.
type maskCache struct {
	cap   int
	order *list.List // front: most recent; values are *maskEntry
	byID  map[int32]*list.Element
}

type maskEntry struct {
	set  int32
	mask []uint64
}

func (c *maskCache) init(capacity int) {
	c.cap, c.order, c.byID = capacity, list.New(), map[int32]*list.Element{}
}

func (c *maskCache) get(s int32) ([]uint64, bool) {
	e, ok := c.byID[s]
	if !ok {
		return nil, false
	}
	c.order.MoveToFront(e)
	return e.Value.(*maskEntry).mask, true
}

func (c *maskCache) put(s int32, mask []uint64) {
	if c.cap <= 0 {
		return
	}
	if c.order.Len() >= c.cap {
		old := c.order.Back()
		c.order.Remove(old)
		delete(c.byID, old.Value.(*maskEntry).set)
	}
	c.byID[s] = c.order.PushFront(&maskEntry{s, mask})
}
