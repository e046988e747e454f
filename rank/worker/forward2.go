package worker

import (
	"encoding/binary"
	"fmt"

	"github.com/tpcoord/tpcoord/rank"
)

// FORWARD in version 2: deltas. Finished ids first, then the rows; a NEW
// row carries its sequence's whole context, a known row the tokens
// appended since the worker last saw it, from position (the number of
// tokens the worker holds).

const (
	forward2HeadSize = 16 // step, n, f
	row2HeadSize     = 24 // id, flags, position, P, T
	// flagNew marks a row whose id the worker has not been sent before.
	flagNew uint32 = 1
)

// rowPlan is how the agent sends one row: whole (NEW) or from position on.
type rowPlan struct {
	known bool
	from  uint32 // tokens the worker holds; 0 for a NEW row
}

// appendForward2 encodes a version 2 FORWARD. plan[i] says how to send
// rows[i]; a known row's tokens are those from plan[i].from on, which the
// caller guarantees is fewer than the row's tokens.
func appendForward2(dst []byte, step uint64, finished []uint64, rows []*rank.Seq, plan []rowPlan) []byte {
	le := binary.LittleEndian
	dst, at := beginFrame(dst, frameForward)
	dst = le.AppendUint64(dst, step)
	dst = le.AppendUint32(dst, uint32(len(rows)))
	dst = le.AppendUint32(dst, uint32(len(finished)))
	for _, id := range finished {
		dst = le.AppendUint64(dst, id)
	}
	for i, r := range rows {
		p := plan[i]
		flags := uint32(0)
		if !p.known {
			flags = flagNew
		}
		total := len(r.Prompt) + len(r.Output)
		dst = le.AppendUint64(dst, r.ID)
		dst = le.AppendUint32(dst, flags)
		dst = le.AppendUint32(dst, p.from)
		dst = le.AppendUint32(dst, uint32(len(r.Prompt)))
		dst = le.AppendUint32(dst, uint32(total-int(p.from)))
		if from := int(p.from); from < len(r.Prompt) {
			dst = appendTokens(dst, r.Prompt[from:])
			dst = appendTokens(dst, r.Output)
		} else {
			dst = appendTokens(dst, r.Output[from-len(r.Prompt):])
		}
	}
	return endFrame(dst, at)
}

// forward2 is a decoded version 2 FORWARD. Its slices are reused from one
// decode to the next.
type forward2 struct {
	Step     uint64
	Finished []uint64
	Rows     []row2
}

// row2 is one row of a version 2 FORWARD.
type row2 struct {
	ID     uint64
	New    bool
	Pos    uint32 // position of Tokens[0] in the sequence
	Prompt uint32 // P, the sequence's prompt length
	Tokens []int32
}

// decodeForward2 decodes a version 2 FORWARD of 1 to maxRows rows into f.
// It checks the layout and the rules that need no state (known flag bits,
// T >= 1, a NEW row at position 0 with P <= T); whether ids are known and
// positions match is the worker's to check. Every count is checked
// against the bytes left before anything is sized from it.
func decodeForward2(b []byte, maxRows uint32, f *forward2) error {
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
	case uint64(nf)*8+uint64(n)*(row2HeadSize+4) > uint64(len(b)):
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
		if b, err = decodeRow2(b, f, i); err != nil {
			return err
		}
	}
	if len(b) != 0 {
		return fmt.Errorf("%w: FORWARD has %d trailing bytes", errGarbage, len(b))
	}
	return nil
}

// decodeRow2 decodes row i from b into a new row of f and returns the rest.
func decodeRow2(b []byte, f *forward2, i uint32) ([]byte, error) {
	le := binary.LittleEndian
	if len(b) < row2HeadSize {
		return nil, fmt.Errorf("%w: FORWARD row %d truncated", errGarbage, i)
	}
	id, flags, pos, np, nt := le.Uint64(b), le.Uint32(b[8:]), le.Uint32(b[12:]), le.Uint32(b[16:]), le.Uint32(b[20:])
	b = b[row2HeadSize:]
	isNew := flags&flagNew != 0
	switch {
	case flags&^flagNew != 0:
		return nil, fmt.Errorf("row %d (sequence %d): unknown flag bits %#x", i, id, flags&^flagNew)
	case nt == 0:
		return nil, fmt.Errorf("row %d (sequence %d): no tokens (T = 0)", i, id)
	case uint64(nt)*4 > uint64(len(b)):
		return nil, fmt.Errorf("%w: FORWARD row %d claims %d tokens in %d bytes", errGarbage, i, nt, len(b))
	case isNew && pos != 0:
		return nil, fmt.Errorf("row %d (sequence %d): NEW at position %d, not 0", i, id, pos)
	case isNew && np > nt:
		return nil, fmt.Errorf("row %d (sequence %d): NEW with a %d-token prompt in %d tokens", i, id, np, nt)
	}
	if len(f.Rows) < cap(f.Rows) {
		f.Rows = f.Rows[:len(f.Rows)+1]
	} else {
		f.Rows = append(f.Rows, row2{})
	}
	r := &f.Rows[len(f.Rows)-1]
	r.ID, r.New, r.Pos, r.Prompt = id, isNew, pos, np
	r.Tokens = decodeTokens(r.Tokens[:0], b[:4*nt])
	return b[4*nt:], nil
}
