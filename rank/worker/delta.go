package worker

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"github.com/tpcoord/tpcoord/rank"
)

// delta is the agent's record of what a version 2 worker holds: for each
// sequence it was sent and not yet told finished, how many tokens it has.
// It lives as long as the connection and starts over when the epoch
// changes. Its slices are reused, so a steady batch costs no allocation.
type delta struct {
	started bool
	epoch   uint32
	held    []heldSeq // sorted by id
	next    []heldSeq // the batch being planned, becomes held
	// The plan of the last advance, for appendForward2.
	plan     []rowPlan
	finished []uint64
}

type heldSeq struct {
	id     uint64
	tokens uint32
	seen   bool // in the batch being planned
}

func cmpHeld(h heldSeq, id uint64) int { return cmp.Compare(h.id, id) }

// advance plans the FORWARD of b (d.plan, d.finished) and records b's rows
// as what the worker will hold. A new epoch finishes every held id and
// sends every row whole. An error (a duplicate id, an empty sequence, a
// sequence with no token the worker lacks) leaves d unusable: the
// connection is then out of sync and the executor fails.
func (d *delta) advance(b rank.Batch) error {
	d.finished, d.plan, d.next = d.finished[:0], d.plan[:0], d.next[:0]
	if d.started && b.Epoch != d.epoch {
		for _, h := range d.held {
			d.finished = append(d.finished, h.id)
		}
		d.held = d.held[:0]
	}
	d.started, d.epoch = true, b.Epoch
	for _, r := range b.Rows {
		p, err := d.planRow(r)
		if err != nil {
			return err
		}
		d.plan = append(d.plan, p)
		d.next = append(d.next, heldSeq{id: r.ID, tokens: uint32(len(r.Prompt) + len(r.Output))})
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

// planRow decides how r is sent: whole if the worker does not hold it,
// else the tokens from the count it holds on.
func (d *delta) planRow(r *rank.Seq) (rowPlan, error) {
	n := len(r.Prompt) + len(r.Output)
	if n == 0 || n > math.MaxUint32 {
		return rowPlan{}, fmt.Errorf("sequence %d has %d tokens (1 to %d can be sent)", r.ID, n, uint32(math.MaxUint32))
	}
	i, ok := slices.BinarySearchFunc(d.held, r.ID, cmpHeld)
	if !ok {
		return rowPlan{}, nil
	}
	h := &d.held[i]
	h.seen = true
	if n <= int(h.tokens) {
		// The mirror appends a token to every row at every step (a row
		// without one leaves the batch), so this is a driver bug.
		return rowPlan{}, fmt.Errorf("sequence %d has %d tokens and the worker holds %d: no new token to send", r.ID, n, h.tokens)
	}
	return rowPlan{known: true, from: h.tokens}, nil
}
