package worker

import (
	"encoding/binary"
	"slices"
	"strings"
	"testing"

	"github.com/tpcoord/tpcoord/rank"
)

// body strips the frame header off an encoded frame.
func body(t testing.TB, frame []byte, typ uint16) []byte {
	t.Helper()
	if len(frame) < frameHeaderSize || binary.LittleEndian.Uint16(frame[4:]) != typ ||
		int(binary.LittleEndian.Uint32(frame)) != len(frame)-frameHeaderSize {
		t.Fatalf("bad frame header % x", frame[:min(len(frame), frameHeaderSize)])
	}
	return frame[frameHeaderSize:]
}

func TestForward1RoundTrip(t *testing.T) {
	b := testBatch(7, 4)
	step, rows, err := decodeForward(body(t, appendForward(nil, b.Step, b.Rows), frameForward), 4, nil)
	if err != nil || step != 7 || len(rows) != 4 {
		t.Fatalf("decode: step %d, %d rows, %v", step, len(rows), err)
	}
	for i, r := range rows {
		w := b.Rows[i]
		if r.ID != w.ID || !slices.Equal(r.Prompt, w.Prompt) || !slices.Equal(r.Output, w.Output) {
			t.Errorf("row %d: %+v, want %+v", i, r, *w)
		}
	}
}

func TestForward2RoundTrip(t *testing.T) {
	rows := []*rank.Seq{
		{ID: 5, Prompt: []int32{1, 2, 3}},                         // NEW, no output
		{ID: 9, Prompt: []int32{4, 5}, Output: []int32{-6, 7, 8}}, // known, 4 held: one new token
		{ID: 2, Prompt: []int32{9}, Output: []int32{10, 11}},      // NEW, resumed with output
		{ID: 3, Prompt: []int32{1, 2, 3, 4}, Output: []int32{5}},  // known, 2 held: from inside the prompt
	}
	plan := []rowPlan{whole(0, 3), whole(4, 5), whole(0, 3), whole(2, 5)}
	frame := appendForward2(nil, 41, []uint64{77, 1 << 60}, rows, plan)
	var f forward2
	if err := decodeForward2(body(t, frame, frameForward), 4, &f); err != nil {
		t.Fatal(err)
	}
	want := []row2{
		{ID: 5, New: true, Pos: 0, Prompt: 3, Tokens: []int32{1, 2, 3}},
		{ID: 9, Pos: 4, Prompt: 2, Tokens: []int32{8}},
		{ID: 2, New: true, Pos: 0, Prompt: 1, Tokens: []int32{9, 10, 11}},
		{ID: 3, Pos: 2, Prompt: 4, Tokens: []int32{3, 4, 5}},
	}
	if f.Step != 41 || !slices.Equal(f.Finished, []uint64{77, 1 << 60}) || len(f.Rows) != len(want) {
		t.Fatalf("decoded step %d, finished %v, %d rows", f.Step, f.Finished, len(f.Rows))
	}
	for i, r := range f.Rows {
		w := want[i]
		if r.ID != w.ID || r.New != w.New || r.Pos != w.Pos || r.Prompt != w.Prompt || !slices.Equal(r.Tokens, w.Tokens) {
			t.Errorf("row %d: %+v, want %+v", i, r, w)
		}
	}
	// The layout, byte by byte, for the first row (docs/worker-protocol.md).
	b := body(t, frame, frameForward)
	le := binary.LittleEndian
	if le.Uint64(b) != 41 || le.Uint32(b[8:]) != 4 || le.Uint32(b[12:]) != 2 || le.Uint64(b[16:]) != 77 {
		t.Errorf("header % x", b[:32])
	}
	r0 := b[32:]
	if le.Uint64(r0) != 5 || le.Uint32(r0[8:]) != flagNew || le.Uint32(r0[12:]) != 0 || le.Uint32(r0[16:]) != 3 || le.Uint32(r0[20:]) != 3 || le.Uint32(r0[24:]) != 1 {
		t.Errorf("row 0 % x", r0[:36])
	}
}

// forward2Body builds a version 2 FORWARD body from parts, valid or not.
func forward2Body(step uint64, n, f uint32, ids []uint64, rows ...[]uint32) []byte {
	le := binary.LittleEndian
	b := le.AppendUint64(nil, step)
	b = le.AppendUint32(b, n)
	b = le.AppendUint32(b, f)
	for _, id := range ids {
		b = le.AppendUint64(b, id)
	}
	for _, r := range rows { // id, flags, position, P, T, tokens...
		b = le.AppendUint64(b, uint64(r[0]))
		for _, v := range r[1:] {
			b = le.AppendUint32(b, v)
		}
	}
	return b
}

// TestForward2Bounds: every malformed body is an error naming what is
// wrong; none panics.
func TestForward2Bounds(t *testing.T) {
	const huge = 1<<32 - 1
	ok := []uint32{7, flagNew, 0, 1, 2, 10, 11}
	cases := []struct {
		name string
		b    []byte
		want string
	}{
		{"empty", nil, "FORWARD of 0 bytes"},
		{"short header", make([]byte, 15), "FORWARD of 15 bytes"},
		{"no rows", forward2Body(1, 0, 0, nil), "no rows"},
		{"n over max batch", forward2Body(1, 9, 0, nil, ok), "9 rows, max batch is 8"},
		{"n overflows the body", forward2Body(1, 8, 0, nil, ok), "claims 0 finished ids and 8 rows"},
		{"f huge", forward2Body(1, 1, huge, []uint64{1}, ok), "claims 4294967295 finished ids"},
		{"f overflows by one id", forward2Body(1, 1, 2, []uint64{1}, ok), "claims 2 finished ids and 1 rows"},
		{"row truncated", forward2Body(1, 2, 0, nil, []uint32{7, flagNew, 0, 1, 8, 1, 2, 3, 4, 5, 6, 7, 8}), "row 1 truncated"},
		{"T huge", forward2Body(1, 1, 0, nil, []uint32{7, flagNew, 0, 1, huge, 1}), "claims 4294967295 tokens"},
		{"T over the body", forward2Body(1, 1, 0, nil, []uint32{7, flagNew, 0, 1, 2, 1}), "claims 2 tokens and 0 blocks in 4 bytes"},
		{"T zero", forward2Body(1, 1, 0, nil, []uint32{7, 0, 3, 1, 0, 1}), "no tokens (T = 0)"},
		{"unknown flags", forward2Body(1, 1, 0, nil, []uint32{7, 6, 0, 1, 1, 1}), "unknown flag bits 0x6"},
		{"NEW not at 0", forward2Body(1, 1, 0, nil, []uint32{7, flagNew, 4, 1, 1, 1}), "NEW at position 4"},
		{"NEW prompt over T", forward2Body(1, 1, 0, nil, []uint32{7, flagNew, 0, 3, 2, 1, 2}), "3-token prompt in 2 tokens"},
		{"trailing", append(forward2Body(1, 1, 0, nil, ok), 0), "1 trailing bytes"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var f forward2
			err := decodeForward2(tc.b, 8, &f)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("decode: %v, want an error containing %q", err, tc.want)
			}
		})
	}
	var f forward2
	if err := decodeForward2(forward2Body(1, 1, 0, nil, ok), 8, &f); err != nil || f.Rows[0].ID != 7 {
		t.Fatalf("the valid body: %v", err)
	}
}

// TestDecodersAllocateNothingFromCounts: a short body claiming the largest
// counts allocates nothing, in either version.
func TestDecodersAllocateNothingFromCounts(t *testing.T) {
	huge2 := forward2Body(1, 1<<32-1, 1<<32-1, nil)
	huge1 := binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint64(nil, 1), 1<<32-1)
	hugeRow := forward2Body(1, 1, 0, nil, []uint32{7, flagNew, 0, 1, 1 << 30, 1})
	var f forward2
	allocs := testing.AllocsPerRun(100, func() {
		if decodeForward2(huge2, 1<<32-1, &f) == nil || decodeForward2(hugeRow, 8, &f) == nil {
			t.Fatal("accepted")
		}
		if _, _, err := decodeForward(huge1, 1<<32-1, nil); err == nil {
			t.Fatal("accepted")
		}
	})
	// Building the error messages allocates a little; sizing a slice from
	// a count of 4e9 would be gigabytes.
	if allocs > 20 {
		t.Errorf("%v allocations per run", allocs)
	}
	if cap(f.Finished) != 0 || cap(f.Rows) != 0 {
		t.Errorf("storage sized from a count: finished %d, rows %d", cap(f.Finished), cap(f.Rows))
	}
}

func TestForward1Bounds(t *testing.T) {
	le := binary.LittleEndian
	head := func(n uint32) []byte { return le.AppendUint32(le.AppendUint64(nil, 3), n) }
	row := func(b []byte, p, o uint32) []byte {
		return le.AppendUint32(le.AppendUint32(le.AppendUint64(b, 1), p), o)
	}
	cases := []struct {
		name string
		b    []byte
		want string
	}{
		{"short", make([]byte, 11), "FORWARD of 11 bytes"},
		{"n over max batch", head(9), "9 rows, max batch is 8"},
		{"n overflows the body", row(head(2), 0, 0), "claims 2 rows in 16 bytes"},
		{"tokens overflow", row(head(1), 1<<31, 1<<31), "claims 4294967296 tokens"},
		{"trailing", append(row(head(1), 0, 0), 1), "1 trailing bytes"},
	}
	for _, tc := range cases {
		if _, _, err := decodeForward(tc.b, 8, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}

// forwardSizes encodes FORWARDs of batch rows of hist-token histories
// (half prompt, half output): the version 1 FORWARD, the version 2 one of
// the first step (every row NEW) and of the next step (every row known,
// one new token each). Sizes are bodies, without the 8-byte frame header.
func forwardSizes(t testing.TB, batch, hist int) (v1, v2first, v2next int) {
	rows := make([]*rank.Seq, batch)
	for i := range rows {
		rows[i] = seq(uint64(i), hist/2, hist-hist/2)
	}
	var d delta
	first := rank.Batch{Epoch: 1, Step: 1, Rows: rows}
	if err := advance(&d, first); err != nil {
		t.Fatal(err)
	}
	v2first = len(appendForward2(nil, 1, d.finished, rows, d.plan)) - frameHeaderSize
	v1 = len(appendForward(nil, 1, rows)) - frameHeaderSize
	for _, r := range rows {
		grow(r, 1)
	}
	if err := d.advance(1, 2, rows); err != nil {
		t.Fatal(err)
	}
	v2next = len(appendForward2(nil, 2, d.finished, rows, d.plan)) - frameHeaderSize
	return v1, v2first, v2next
}

// TestForwardSizes measures the figures docs/worker-protocol.md quotes:
// batch 32 with 2,000-token histories.
func TestForwardSizes(t *testing.T) {
	v1, v2first, v2next := forwardSizes(t, 32, 2000)
	t.Logf("batch 32 × 2,000-token histories: v1 FORWARD body %d bytes (%.1f KiB); v2 first step %d bytes, later steps %d bytes", v1, float64(v1)/1024, v2first, v2next)
	if v1 != 12+32*(16+4*2000) || v2first != 16+32*(24+4*2000) || v2next != 16+32*(24+4) {
		t.Errorf("sizes v1 %d, v2 first %d, v2 next %d differ from the layouts", v1, v2first, v2next)
	}
	if v2next != 912 {
		t.Errorf("v2 continuing FORWARD is %d bytes, the doc says 912", v2next)
	}
}

// FuzzDecodeForward2: any body decodes or fails without panicking, and one
// that decodes encodes back to the same bytes.
func FuzzDecodeForward2(f *testing.F) {
	f.Add(forward2Body(1, 1, 0, nil, []uint32{7, flagNew, 0, 1, 2, 10, 11}))
	f.Add(forward2Body(9, 2, 1, []uint64{3}, []uint32{7, 0, 5, 2, 1, 4}, []uint32{8, flagNew, 0, 0, 1, 9}))
	f.Add(forward2Body(1, 1<<32-1, 1<<32-1, nil))
	f.Add(forward2Body(1, 1, 0, nil, []uint32{7, 2, 0, 1, 1, 1}))
	f.Add(forward2Body(1, 1, 0, nil, []uint32{7, flagNew, 0, 1, 1 << 30, 1}))
	f.Fuzz(func(t *testing.T, b []byte) {
		var fw forward2
		if err := decodeForward2(b, 64, &fw); err != nil {
			return
		}
		rows, plan, ok := rebuild(&fw)
		if !ok {
			return
		}
		if got := appendForward2(nil, fw.Step, fw.Finished, rows, plan)[frameHeaderSize:]; !slices.Equal(got, b) {
			t.Fatalf("re-encoded\n% x\nfrom\n% x", got, b)
		}
	})
}

// rebuild makes sequences and a plan that encode to f's rows: a known row
// at position p with prompt P gets p tokens before its new ones. It gives
// up (ok false) when that cannot be built small.
func rebuild(f *forward2) ([]*rank.Seq, []rowPlan, bool) {
	var rows []*rank.Seq
	var plan []rowPlan
	for _, r := range f.Rows {
		if r.Pos > 1<<16 || uint64(r.Prompt) > uint64(r.Pos)+uint64(len(r.Tokens)) {
			return nil, nil, false
		}
		all := append(make([]int32, r.Pos, int(r.Pos)+len(r.Tokens)), r.Tokens...)
		rows = append(rows, &rank.Seq{ID: r.ID, Prompt: all[:r.Prompt], Output: all[r.Prompt:]})
		plan = append(plan, rowPlan{known: !r.New, from: r.Pos, to: r.Pos + uint32(len(r.Tokens))})
	}
	return rows, plan, true
}
