package worker

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"github.com/tpcoord/tpcoord/rank"
)

// delta is the agent's record of what a version 2 or 3 worker holds: for
// each sequence it was sent and not yet told finished, how many tokens
// (and, version 3, how many blocks of its table) it has. It lives as long
// as the connection and starts over when the epoch changes. Its slices are
// reused, so a steady batch costs no allocation.
type delta struct {
	// chunked: a row feeds up to its Fed, not its whole length (version
	// 3). paged: rows carry their new blocks, and a NEW row starts after
	// its cached prefix (version 3, a worker with a block pool of
	// blockSize tokens a block).
	chunked, paged bool
	blockSize      uint32

	started bool
	epoch   uint32
	step    uint64    // of the last FORWARD
	held    []heldSeq // sorted by id
	next    []heldSeq // the batch being planned, becomes held
	// The plan of the last advance, for appendForwardDelta.
	plan     []rowPlan
	finished []uint64
}

type heldSeq struct {
	id     uint64
	tokens uint32
	blocks uint32 // blocks of its table sent so far (paged only)
	seen   bool   // in the batch being planned
}

func cmpHeld(h heldSeq, id uint64) int { return cmp.Compare(h.id, id) }

// advance plans the FORWARD of step (d.plan, d.finished) for rows and
// records them as what the worker will hold.
//
// Every held id is finished and every row sent NEW when the epoch changes,
// and also when the step does not follow the last FORWARD's: steps are
// numbered one by one, so a gap means a step ran without a FORWARD: no
// rows, or (for a version 1 or 2 worker) only a row being prefilled, so
// every sequence the worker held had left the batch; one that is back was
// admitted again, with a new table, and rank 0 prefills it again from its
// start.
//
// An error (a duplicate id, an empty sequence, a row with nothing to feed,
// a table that shrank) leaves d unusable: the connection is then out of
// sync and the executor fails.
func (d *delta) advance(epoch uint32, step uint64, rows []*rank.Seq) error {
	d.finished, d.plan, d.next = d.finished[:0], d.plan[:0], d.next[:0]
	if d.started && (epoch != d.epoch || step != d.step+1) {
		for _, h := range d.held {
			d.finished = append(d.finished, h.id)
		}
		d.held = d.held[:0]
	}
	d.started, d.epoch, d.step = true, epoch, step
	for _, r := range rows {
		p, sent, err := d.planRow(r)
		if err != nil {
			return err
		}
		d.plan = append(d.plan, p)
		d.next = append(d.next, heldSeq{id: r.ID, tokens: p.to, blocks: sent + uint32(len(p.blocks))})
	}
	for _, h := range d.held {
		if !h.seen {
			d.finished = append(d.finished, h.id)
		}
	}
	slices.SortFunc(d.next, func(a, b heldSeq) int { return cmp.Compare(a.id, b.id) })
	for i := 1; i < len(d.next); i++ {
		if d.next[i].id == d.next[i-1].id {
			return fmt.Errorf("sequence %d is in the batch twice", d.next[i].id)
		}
	}
	d.held, d.next = d.next, d.held
	return nil
}

// planRow decides how r is sent: from the count the worker holds if it
// holds r, else NEW from its cached prefix (paged) or token 0; up to its
// Fed (chunked) or its length. sent is how many blocks of its table the
// worker has.
func (d *delta) planRow(r *rank.Seq) (p rowPlan, sent uint32, err error) {
	n := r.Len()
	to := n
	if d.chunked {
		to = r.Fed
	}
	switch {
	case n == 0 || n > math.MaxUint32:
		return p, 0, fmt.Errorf("sequence %d has %d tokens (1 to %d can be sent)", r.ID, n, uint32(math.MaxUint32))
	case to > n:
		return p, 0, fmt.Errorf("sequence %d: Fed %d is beyond its %d tokens", r.ID, to, n)
	}
	p.to = uint32(max(to, 0))
	if i, ok := slices.BinarySearchFunc(d.held, r.ID, cmpHeld); ok {
		h := &d.held[i]
		h.seen = true
		p.known, p.from, sent = true, h.tokens, h.blocks
	} else if d.chunked {
		if p.from, err = d.cached(r); err != nil {
			return p, 0, err
		}
	}
	if p.to <= p.from {
		// The mirror feeds every row something at every step (a row
		// without a token leaves the batch), so this is a driver bug.
		if d.chunked {
			return p, 0, fmt.Errorf("sequence %d: Fed %d and the worker holds %d of its tokens: nothing to feed", r.ID, to, p.from)
		}
		return p, 0, fmt.Errorf("sequence %d has %d tokens and the worker holds %d: no new token to send", r.ID, n, p.from)
	}
	if d.paged {
		if len(r.Blocks) < int(sent) {
			return p, 0, fmt.Errorf("sequence %d: table of %d blocks, the worker was sent %d", r.ID, len(r.Blocks), sent)
		}
		p.blocks = r.Blocks[sent:]
	}
	return p, sent, nil
}

// cached is the position a version 3 NEW row is sent at: its cached
// prefix (Seq.Cached tokens, held in the first Cached/bs blocks of the
// table the row brings, which the worker reads and never writes) when the
// worker has a block pool; 0 when it has none (it recomputes the prefix).
func (d *delta) cached(r *rank.Seq) (uint32, error) {
	c := r.Cached
	switch {
	case c == 0:
		return 0, nil
	case c < 0 || c >= r.Fed:
		return 0, fmt.Errorf("sequence %d: Cached %d is not in [0, Fed %d)", r.ID, c, r.Fed)
	case !d.paged:
		return 0, nil
	case d.blockSize == 0 || c%int(d.blockSize) != 0:
		return 0, fmt.Errorf("sequence %d: Cached %d is not a multiple of the worker's block size %d", r.ID, c, d.blockSize)
	}
	return uint32(c), nil
}
