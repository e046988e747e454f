package core

// The prefix cache's side of the scheduler: hashing the blocks the rows
// fill, registering them once their forward pass has run, and finding a
// waiting request's prefix among them.

// hashesOf returns the chained hashes of r's first n full blocks,
// computing those it has not yet.
func (s *Scheduler) hashesOf(r *Request, n int) []BlockHash {
	bs := s.blocks.Config().BlockSize
	for j := len(r.hashes); j < n; j++ {
		var parent BlockHash
		if j > 0 {
			parent = r.hashes[j-1]
		}
		tokens := r.Prompt[min(j*bs, len(r.Prompt)):min((j+1)*bs, len(r.Prompt))]
		if len(tokens) < bs { // the block reaches into the output
			s.scratch = s.scratch[:0]
			for i := j * bs; i < (j+1)*bs; i++ {
				s.scratch = append(s.scratch, r.token(i))
			}
			tokens = s.scratch
		}
		// No adapters, salts or multimodal inputs yet: the tokens alone
		// determine the block's keys and values.
		r.hashes = append(r.hashes, HashBlock(parent, nil, tokens))
	}
	return r.hashes[:n]
}

// cacheFed registers in the cache the running rows' blocks that the last
// step's forward pass filled: it has run, so a row admitted from now on
// may read them.
func (s *Scheduler) cacheFed() {
	if s.pending == nil {
		return
	}
	clear(s.pending)
	bs := s.blocks.Config().BlockSize
	for _, r := range s.running {
		full := r.Fed / bs
		hashes, table := s.hashesOf(r, full), s.blocks.Table(r.Seq)
		for j := r.registered; j < full; j++ {
			s.blocks.Cache(table[j], hashes[j])
		}
		r.registered = max(r.registered, full)
	}
}

// markPending notes the blocks r's row fills in this step's forward pass:
// not readable before it has run, they are registered at the next Next.
func (s *Scheduler) markPending(r *Request) {
	if s.pending == nil {
		return
	}
	full := r.Fed / s.blocks.Config().BlockSize
	for _, h := range s.hashesOf(r, full)[r.registered:] {
		s.pending[h] = struct{}{}
	}
}

// lookup finds the head of the queue's longest cached prefix: its blocks
// and the tokens they hold, fewer than r's length. wait reports that the
// block after that prefix is one this step's pass fills for another row:
// admitted at the next step r will share it, instead of computing it
// again beside it.
func (s *Scheduler) lookup(r *Request) (hit []BlockID, cached int, wait bool) {
	if s.pending == nil {
		return nil, 0, false
	}
	need, bs := r.length(), s.blocks.Config().BlockSize
	hashes := s.hashesOf(r, need/bs)
	hit, cached = s.blocks.Match(hashes, need)
	if m := len(hit); m < len(hashes) && (m+1)*bs < need {
		_, wait = s.pending[hashes[m]]
	}
	return hit, cached, wait
}
