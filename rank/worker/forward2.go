package worker

import (
	"encoding/binary"
	"fmt"

	"github.com/tpcoord/tpcoord/rank"
	"github.com/tpcoord/tpcoord/rank/core"
)

// FORWARD in versions 2 and 3: deltas. Finished ids first, then the rows;
// a NEW row carries its sequence from token 0 (version 3: from the end of
// its cached prefix, held in the first blocks of the table it brings), a
// known row the tokens from position (the number of tokens the worker
// holds) on. In version 2 a row always runs to the sequence's end; in
// version 3 it may stop short (chunked prefill: no SAMPLE flag), and its
// header adds B, the count of new block IDs that follow its tokens.

const (
	forward2HeadSize = 16 // step, n, f
	row2HeadSize     = 24 // id, flags, position, P, T
	row3HeadSize     = 28 // id, flags, position, P, T, B
	// flagNew marks a row whose id the worker has not been sent before.
	flagNew uint32 = 1
	// flagSample (version 3) marks a row whose logits are sampled: its
	// tokens run to the sequence's end.
	flagSample uint32 = 2
)

// rowPlan is how the agent sends one row: tokens [from, to) of the
// sequence, NEW or known, and (version 3) the blocks appended to its table.
type rowPlan struct {
	known  bool
	from   uint32 // tokens the worker holds; a NEW row's cached prefix (or 0)
	to     uint32 // tokens it holds after the row
	blocks []core.BlockID
}

// appendForward2 encodes a version 2 FORWARD: plan[i] says how to send
// rows[i]; the caller guarantees from < to ≤ the row's length.
func appendForward2(dst []byte, step uint64, finished []uint64, rows []*rank.Seq, plan []rowPlan) []byte {
	return appendForwardDelta(dst, ProtocolV2, step, finished, rows, plan)
}

// appendForward3 encodes a version 3 FORWARD, as appendForward2 but with
// the SAMPLE flag and each row's new blocks.
func appendForward3(dst []byte, step uint64, finished []uint64, rows []*rank.Seq, plan []rowPlan) []byte {
	return appendForwardDelta(dst, ProtocolV3, step, finished, rows, plan)
}

func appendForwardDelta(dst []byte, version uint32, step uint64, finished []uint64, rows []*rank.Seq, plan []rowPlan) []byte {
	le := binary.LittleEndian
	dst, at := beginFrame(dst, frameForward)
	dst = le.AppendUint64(dst, step)
	dst = le.AppendUint32(dst, uint32(len(rows)))
	dst = le.AppendUint32(dst, uint32(len(finished)))
	for _, id := range finished {
		dst = le.AppendUint64(dst, id)
	}
	for i, r := range rows {
		dst = appendRow(dst, version, r, &plan[i])
	}
	return endFrame(dst, at)
}

// appendRow encodes one row: its header (24 bytes, 28 in version 3), its
// tokens, and in version 3 its new block IDs.
func appendRow(dst []byte, version uint32, r *rank.Seq, p *rowPlan) []byte {
	le := binary.LittleEndian
	flags := uint32(0)
	if !p.known {
		flags |= flagNew
	}
	v3 := version >= ProtocolV3
	if v3 && int(p.to) == r.Len() {
		flags |= flagSample
	}
	dst = le.AppendUint64(dst, r.ID)
	dst = le.AppendUint32(dst, flags)
	dst = le.AppendUint32(dst, p.from)
	dst = le.AppendUint32(dst, uint32(len(r.Prompt)))
	dst = le.AppendUint32(dst, p.to-p.from)
	if v3 {
		dst = le.AppendUint32(dst, uint32(len(p.blocks)))
	}
	dst = appendSpan(dst, r, int(p.from), int(p.to))
	if v3 {
		dst = appendBlocks(dst, p.blocks)
	}
	return dst
}

// appendSpan appends tokens [from, to) of r: its prompt, then its output.
func appendSpan(dst []byte, r *rank.Seq, from, to int) []byte {
	np := len(r.Prompt)
	if from < np {
		dst = appendTokens(dst, r.Prompt[from:min(to, np)])
	}
	if to > np {
		dst = appendTokens(dst, r.Output[max(from-np, 0):to-np])
	}
	return dst
}

func appendBlocks(dst []byte, ids []core.BlockID) []byte {
	for _, id := range ids {
		dst = binary.LittleEndian.AppendUint32(dst, uint32(id))
	}
	return dst
}

// forward2 is a decoded version 2 or 3 FORWARD. Its slices are reused from
// one decode to the next.
type forward2 struct {
	Step     uint64
	Finished []uint64
	Rows     []row2
}

// row2 is one row of a version 2 or 3 FORWARD.
type row2 struct {
	ID     uint64
	New    bool
	Sample bool   // version 3; always true in version 2
	Pos    uint32 // position of Tokens[0] in the sequence
	Prompt uint32 // P, the sequence's prompt length
	Tokens []int32
	Blocks []uint32 // version 3: block IDs appended to the table
}

// decodeForward2 decodes a version 2 FORWARD; see decodeForwardDelta.
func decodeForward2(b []byte, maxRows uint32, f *forward2) error {
	return decodeForwardDelta(b, maxRows, ProtocolV2, f)
}

// decodeForwardDelta decodes a version 2 or 3 FORWARD of 1 to maxRows rows
// into f. It checks the layout and the rules that need no state (known
// flag bits, T >= 1, a version 2 NEW row at position 0, a sampled row
// holding its whole prompt); whether ids are known, positions match and
// tables fit (and where a version 3 NEW row may start) is the worker's to
// check. Every count is checked against the bytes left
// before anything is sized from it.
func decodeForwardDelta(b []byte, maxRows, version uint32, f *forward2) error {
	le := binary.LittleEndian
	if len(b) < forward2HeadSize {
		return fmt.Errorf("%w: FORWARD of %d bytes", errGarbage, len(b))
	}
	f.Step = le.Uint64(b)
	n, nf := le.Uint32(b[8:]), le.Uint32(b[12:])
	b = b[forward2HeadSize:]
	switch {
	case n == 0:
		return fmt.Errorf("%w: FORWARD of step %d has no rows", errGarbage, f.Step)
	case n > maxRows:
		return fmt.Errorf("step %d has %d rows, max batch is %d", f.Step, n, maxRows)
	case uint64(nf)*8+uint64(n)*(uint64(rowHeadSize(version))+4) > uint64(len(b)):
		return fmt.Errorf("%w: FORWARD claims %d finished ids and %d rows in %d bytes", errGarbage, nf, n, len(b))
	}
	f.Finished = f.Finished[:0]
	for i := range nf {
		f.Finished = append(f.Finished, le.Uint64(b[8*i:]))
	}
	b = b[8*uint64(nf):]
	f.Rows = f.Rows[:0]
	for i := range n {
		var err error
		if b, err = decodeRow(b, version, f, i); err != nil {
			return err
		}
	}
	if len(b) != 0 {
		return fmt.Errorf("%w: FORWARD has %d trailing bytes", errGarbage, len(b))
	}
	return nil
}

func rowHeadSize(version uint32) int {
	if version >= ProtocolV3 {
		return row3HeadSize
	}
	return row2HeadSize
}

// decodeRow decodes row i from b into a new row of f and returns the rest.
func decodeRow(b []byte, version uint32, f *forward2, i uint32) ([]byte, error) {
	le := binary.LittleEndian
	head := rowHeadSize(version)
	if len(b) < head {
		return nil, fmt.Errorf("%w: FORWARD row %d truncated", errGarbage, i)
	}
	id, flags, pos, np, nt := le.Uint64(b), le.Uint32(b[8:]), le.Uint32(b[12:]), le.Uint32(b[16:]), le.Uint32(b[20:])
	allowed, nb := flagNew, uint32(0)
	if version >= ProtocolV3 {
		allowed, nb = flagNew|flagSample, le.Uint32(b[24:])
	}
	b = b[head:]
	isNew := flags&flagNew != 0
	sample := version < ProtocolV3 || flags&flagSample != 0 // every version 2 row is sampled
	switch {
	case flags&^allowed != 0:
		return nil, fmt.Errorf("row %d (sequence %d): unknown flag bits %#x", i, id, flags&^allowed)
	case nt == 0:
		return nil, fmt.Errorf("row %d (sequence %d): no tokens (T = 0)", i, id)
	case (uint64(nt)+uint64(nb))*4 > uint64(len(b)):
		return nil, fmt.Errorf("%w: FORWARD row %d claims %d tokens and %d blocks in %d bytes", errGarbage, i, nt, nb, len(b))
	case isNew && pos != 0 && version < ProtocolV3:
		return nil, fmt.Errorf("row %d (sequence %d): NEW at position %d, not 0", i, id, pos)
	case sample && uint64(np) > uint64(pos)+uint64(nt):
		return nil, fmt.Errorf("row %d (sequence %d): sampled with a %d-token prompt in %d tokens", i, id, np, uint64(pos)+uint64(nt))
	}
	if len(f.Rows) < cap(f.Rows) {
		f.Rows = f.Rows[:len(f.Rows)+1]
	} else {
		f.Rows = append(f.Rows, row2{})
	}
	r := &f.Rows[len(f.Rows)-1]
	r.ID, r.New, r.Sample, r.Pos, r.Prompt = id, isNew, sample, pos, np
	r.Tokens = decodeTokens(r.Tokens[:0], b[:4*nt])
	b = b[4*nt:]
	r.Blocks = r.Blocks[:0]
	for k := range nb {
		r.Blocks = append(r.Blocks, le.Uint32(b[4*k:]))
	}
	return b[4*nb:], nil
}
