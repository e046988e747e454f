package worker

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/tpcoord/tpcoord/rank"
)

// FORWARD in version 1: the step and every row's whole token history.

const (
	forward1HeadSize = 12 // step, n
	row1HeadSize     = 16 // id, P, O
)

// appendForward encodes a version 1 FORWARD.
func appendForward(dst []byte, step uint64, rows []*rank.Seq) []byte {
	dst, at := beginFrame(dst, frameForward)
	dst = binary.LittleEndian.AppendUint64(dst, step)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(rows)))
	for _, r := range rows {
		dst = binary.LittleEndian.AppendUint64(dst, r.ID)
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(r.Prompt)))
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(r.Output)))
		dst = appendTokens(dst, r.Prompt)
		dst = appendTokens(dst, r.Output)
	}
	return endFrame(dst, at)
}

func appendTokens(dst []byte, toks []int32) []byte {
	n := len(dst)
	dst = slices.Grow(dst, 4*len(toks))[:n+4*len(toks)] // allocates only to grow
	b := dst[n:]
	for i, t := range toks {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(t))
	}
	return dst
}

// decodeForward decodes a version 1 FORWARD of at most maxRows rows into
// rows, reusing their storage. Every count is checked against the bytes
// left before anything is sized from it.
func decodeForward(b []byte, maxRows uint32, rows []rank.Seq) (uint64, []rank.Seq, error) {
	if len(b) < forward1HeadSize {
		return 0, rows, fmt.Errorf("%w: FORWARD of %d bytes", errGarbage, len(b))
	}
	step := binary.LittleEndian.Uint64(b)
	n := binary.LittleEndian.Uint32(b[8:])
	b = b[forward1HeadSize:]
	if n > maxRows {
		return 0, rows, fmt.Errorf("step %d has %d rows, max batch is %d", step, n, maxRows)
	}
	if uint64(n)*row1HeadSize > uint64(len(b)) {
		return 0, rows, fmt.Errorf("%w: FORWARD claims %d rows in %d bytes", errGarbage, n, len(b))
	}
	rows = rows[:0]
	for i := uint32(0); i < n; i++ {
		if len(b) < row1HeadSize {
			return 0, rows, fmt.Errorf("%w: FORWARD row %d truncated", errGarbage, i)
		}
		id := binary.LittleEndian.Uint64(b)
		np, no := uint64(binary.LittleEndian.Uint32(b[8:])), uint64(binary.LittleEndian.Uint32(b[12:]))
		b = b[row1HeadSize:]
		if (np+no)*4 > uint64(len(b)) {
			return 0, rows, fmt.Errorf("%w: FORWARD row %d claims %d tokens in %d bytes", errGarbage, i, np+no, len(b))
		}
		if len(rows) < cap(rows) {
			rows = rows[:len(rows)+1]
		} else {
			rows = append(rows, rank.Seq{})
		}
		r := &rows[len(rows)-1]
		r.ID = id
		r.Prompt = decodeTokens(r.Prompt[:0], b[:4*np])
		r.Output = decodeTokens(r.Output[:0], b[4*np:4*(np+no)])
		b = b[4*(np+no):]
	}
	if len(b) != 0 {
		return 0, rows, fmt.Errorf("%w: FORWARD has %d trailing bytes", errGarbage, len(b))
	}
	return step, rows, nil
}

func decodeTokens(dst []int32, b []byte) []int32 {
	for i := 0; i < len(b); i += 4 {
		dst = append(dst, int32(binary.LittleEndian.Uint32(b[i:])))
	}
	return dst
}

func appendForwardOK(dst []byte, step uint64, rows uint32) []byte {
	dst, at := beginFrame(dst, frameForwardOK)
	dst = binary.LittleEndian.AppendUint64(dst, step)
	dst = binary.LittleEndian.AppendUint32(dst, rows)
	return endFrame(dst, at)
}
