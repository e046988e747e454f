package broadcast

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"testing"
)

func TestReplayRequestRoundTrip(t *testing.T) {
	want := ReplayRequest{Epoch: 3, Rank: 7, From: 10, To: 99}
	msg := testCodec.AppendReplayRequest(nil, &want)
	var got ReplayRequest
	if err := testCodec.DecodeReplayRequest(msg, &got); err != nil || got != want {
		t.Fatalf("got %+v, %v; want %+v", got, err, want)
	}
	for _, bad := range []ReplayRequest{{From: 0, To: 5}, {From: 6, To: 5}} {
		msg := testCodec.AppendReplayRequest(nil, &bad)
		if err := testCodec.DecodeReplayRequest(msg, &got); !errors.Is(err, ErrBounds) {
			t.Errorf("range %d..%d: err = %v, want ErrBounds", bad.From, bad.To, err)
		}
	}
	for n := range len(msg) {
		if err := testCodec.DecodeReplayRequest(msg[:n], &got); err == nil {
			t.Fatalf("truncated to %d bytes: no error", n)
		}
	}
	if err := NewCodec(testJobHash+1, nil).DecodeReplayRequest(msg, &got); !errors.Is(err, ErrJob) {
		t.Errorf("other job: err = %v, want ErrJob", err)
	}
}

func TestReplayReplyRoundTrip(t *testing.T) {
	s1 := testCodec.AppendStep(nil, &Step{Epoch: 2, Step: 5})
	s2 := testCodec.AppendStep(nil, &Step{Epoch: 2, Step: 6, Admitted: []Admission{{Seq: 1, Prompt: []int32{1, 2}}}})
	want := ReplayReply{Epoch: 2, Status: ReplayOK, Oldest: 3, Leader: 0x5eed1e55, Steps: [][]byte{s1, s2}}
	msg := testCodec.AppendReplayReply(nil, &want)
	var got ReplayReply
	if err := testCodec.DecodeReplayReply(msg, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for n := range len(msg) {
		if err := testCodec.DecodeReplayReply(msg[:n], &got); err == nil {
			t.Fatalf("truncated to %d bytes: no error", n)
		}
	}
	// A step length beyond the bytes present, with a valid checksum.
	bad := append([]byte(nil), msg[:len(msg)-4]...)
	bad[replayReplyFixed] = 0xff
	if err := testCodec.DecodeReplayReply(reseal(bad), &got); !errors.Is(err, ErrShort) {
		t.Errorf("oversized step length: err = %v, want ErrShort", err)
	}
}

// TestWindow: the window serves consecutive steps from the oldest kept,
// refuses what it no longer has, bounds a reply's size, and starts over
// in a new epoch.
func TestWindow(t *testing.T) {
	w := NewWindow(4, 0)
	if rep := w.Serve(&ReplayRequest{From: 1, To: 1}, 1<<20); rep.Status != ReplayBeyondWindow {
		t.Fatalf("empty window: %+v", rep)
	}
	msg := func(k uint64) []byte { return testCodec.AppendStep(nil, &Step{Epoch: 1, Step: k}) }
	for k := uint64(1); k <= 6; k++ {
		w.Add(1, k, msg(k))
	}
	cases := []struct {
		name     string
		req      ReplayRequest
		maxBytes int
		status   uint8
		steps    []uint64
	}{
		{"all kept", ReplayRequest{Epoch: 1, From: 3, To: 6}, 1 << 20, ReplayOK, []uint64{3, 4, 5, 6}},
		{"beyond newest is cut", ReplayRequest{Epoch: 1, From: 5, To: 9}, 1 << 20, ReplayOK, []uint64{5, 6}},
		{"older than the window", ReplayRequest{Epoch: 1, From: 2, To: 6}, 1 << 20, ReplayBeyondWindow, nil},
		{"wrong epoch", ReplayRequest{Epoch: 2, From: 3, To: 6}, 1 << 20, ReplayWrongEpoch, nil},
		{"size bound keeps at least one", ReplayRequest{Epoch: 1, From: 3, To: 6}, 1, ReplayOK, []uint64{3}},
	}
	for _, c := range cases {
		rep := w.Serve(&c.req, c.maxBytes)
		if rep.Status != c.status || len(rep.Steps) != len(c.steps) {
			t.Errorf("%s: status %d with %d steps, want %d with %v", c.name, rep.Status, len(rep.Steps), c.status, c.steps)
			continue
		}
		for i, b := range rep.Steps {
			if !bytes.Equal(b, msg(c.steps[i])) {
				t.Errorf("%s: step %d is not step %d's encoding", c.name, i, c.steps[i])
			}
		}
		if rep.Oldest != 3 && c.status != ReplayWrongEpoch {
			t.Errorf("%s: oldest %d, want 3", c.name, rep.Oldest)
		}
	}
	// The window copies what it is given.
	b := msg(7)
	w.Add(1, 7, b)
	b[0] = 'X'
	if rep := w.Serve(&ReplayRequest{Epoch: 1, From: 7, To: 7}, 1<<20); !bytes.Equal(rep.Steps[0], msg(7)) {
		t.Error("window aliases the caller's buffer")
	}
	// A new epoch starts over.
	w.Add(2, 1, testCodec.AppendStep(nil, &Step{Epoch: 2, Step: 1}))
	if rep := w.Serve(&ReplayRequest{Epoch: 2, From: 1, To: 1}, 1<<20); rep.Status != ReplayOK || rep.Oldest != 1 {
		t.Errorf("after a new epoch: %+v", rep)
	}
}

func FuzzDecodeReplayRequest(f *testing.F) {
	for _, c := range fuzzCodecs {
		f.Add(c.AppendReplayRequest(nil, &ReplayRequest{Epoch: 1, Rank: 2, From: 3, To: 4}))
	}
	f.Add([]byte("TPCR"))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, c := range fuzzCodecs {
			msg := fuzzInput(c, data)
			var r ReplayRequest
			if err := c.DecodeReplayRequest(msg, &r); err == nil {
				checkReencoding(t, c, msg, c.AppendReplayRequest(nil, &r))
			}
		}
	})
}

func FuzzDecodeReplayReply(f *testing.F) {
	for _, c := range fuzzCodecs {
		s := c.AppendStep(nil, &Step{Epoch: 1, Step: 2, Tokens: []Token{{Seq: 1, Token: 3}}})
		f.Add(c.AppendReplayReply(nil, &ReplayReply{Epoch: 1, Oldest: 1, Leader: 0x5eed1e55, Steps: [][]byte{s, s}}))
		f.Add(c.AppendReplayReply(nil, &ReplayReply{Status: ReplayBeyondWindow, Leader: 1}))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, c := range fuzzCodecs {
			msg := fuzzInput(c, data)
			var r ReplayReply
			if err := c.DecodeReplayReply(msg, &r); err != nil {
				continue
			}
			checkReencoding(t, c, msg, c.AppendReplayReply(nil, &r))
			var st Step
			for _, s := range r.Steps {
				_ = c.DecodeStep(s, &st) // must not panic
			}
		}
	})
}

// TestReplayReplyLayout pins the reply's fixed part to docs/protocol.md:
// the serving rank 0's leader at 36, the first step's length at 40; and
// checks that the decoder stays strict about it.
func TestReplayReplyLayout(t *testing.T) {
	s1 := testCodec.AppendStep(nil, &Step{Epoch: 2, Leader: 0x5eed1e55, Step: 5})
	r := ReplayReply{Epoch: 2, Status: ReplayOK, Oldest: 3, Leader: 0x5eed1e55, Steps: [][]byte{s1}}
	msg := func() []byte { return testCodec.AppendReplayReply(nil, &r) }
	b := msg()
	if replayReplyFixed != 40 || len(b) != 40+4+len(s1)+MACSize+4 {
		t.Fatalf("reply is %d bytes with a fixed part of %d, want %d and 40", len(b), replayReplyFixed, 40+4+len(s1)+MACSize+4)
	}
	if string(b[:4]) != "TPCP" || b[4] != Version {
		t.Fatalf("header % x", b[:5])
	}
	for _, f := range []struct {
		name      string
		off, size int
		want      uint64
	}{
		{"epoch", 16, 4, 2},
		{"status", 20, 1, ReplayOK},
		{"reserved", 21, 3, 0},
		{"oldest", 24, 8, 3},
		{"steps", 32, 4, 1},
		{"leader", 36, 4, 0x5eed1e55},
		{"first step length", 40, 4, uint64(len(s1))},
	} {
		if got := le(b[f.off : f.off+f.size]); got != f.want {
			t.Errorf("%s at %d: %#x, want %#x", f.name, f.off, got, f.want)
		}
	}
	if !bytes.Equal(b[44:44+len(s1)], s1) {
		t.Error("the step does not follow its length")
	}
	if mac := b[len(b)-4-MACSize : len(b)-4]; !bytes.Equal(mac, make([]byte, MACSize)) {
		t.Errorf("the MAC of a reply without a key is %x, want zeros", mac)
	}
	for _, tc := range []struct {
		name   string
		tamper func([]byte) []byte
		want   error
	}{
		{"leader changed, checksum not", func(b []byte) []byte { b[37] ^= 1; return b }, ErrChecksum},
		{"checksum corrupted", func(b []byte) []byte { b[len(b)-1] ^= 0x80; return b }, ErrChecksum},
		{"trailing byte", func(b []byte) []byte { return reseal(append(b, 0)) }, ErrTrailing},
		{"reserved byte set", func(b []byte) []byte { b[22] = 1; return reseal(b) }, ErrVersion},
		{"version 1", func(b []byte) []byte { b[4] = 1; return reseal(b) }, ErrVersion},
		{"step count over limit", func(b []byte) []byte { b[32], b[33] = 0x01, 0x10; return reseal(b) }, ErrBounds},
		{"no room for the leader", func(b []byte) []byte { return reseal(append(b[:36:36], 0, 0, 0, 0)) }, ErrShort},
	} {
		var got ReplayReply
		if err := testCodec.DecodeReplayReply(tc.tamper(msg()), &got); !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.want)
		}
	}
	// A refusal carries the leader too.
	refusal := testCodec.AppendReplayReply(nil, &ReplayReply{Epoch: 7, Status: ReplayWrongEpoch, Leader: 9})
	var got ReplayReply
	if err := testCodec.DecodeReplayReply(refusal, &got); err != nil || got.Leader != 9 || got.Status != ReplayWrongEpoch || len(got.Steps) != 0 {
		t.Errorf("refusal: %+v, %v", got, err)
	}
}

// TestWindowEvictsByBytes: the window drops its oldest steps to stay
// within its byte budget, keeps a step larger than the budget alone (the
// newest step is always replayable), and does not keep a large step's
// buffer alive for a small one.
func TestWindowEvictsByBytes(t *testing.T) {
	// msg is step k with removals removals, and a token if removals is
	// 8: a step as long as two empty ones (76 bytes: 8×8 + 12).
	msg := func(k uint64, removals int) []byte {
		st := &Step{Epoch: 1, Step: k}
		for i := range removals {
			st.Removed = append(st.Removed, uint64(i+1))
		}
		if removals == 8 {
			st.Tokens = []Token{{Seq: 1, Token: 2}}
		}
		return testCodec.AppendStep(nil, st)
	}
	small := len(msg(1, 0))
	if len(msg(1, 8)) != 2*small {
		t.Fatalf("a step of 8 removals and a token is %d bytes, the test assumes 2×%d", len(msg(1, 8)), small)
	}
	served := func(w *Window, from, to uint64) *ReplayReply {
		return w.Serve(&ReplayRequest{Epoch: 1, From: from, To: to}, 1<<20)
	}
	check := func(w *Window, oldest uint64, bytes int) {
		t.Helper()
		rep := served(w, oldest, math.MaxUint64)
		if rep.Status != ReplayOK || rep.Oldest != oldest || w.Bytes() != bytes {
			t.Fatalf("window: status %d, oldest %d, %d bytes; want ok, %d, %d", rep.Status, rep.Oldest, w.Bytes(), oldest, bytes)
		}
		if rep := served(w, oldest-1, oldest-1); oldest > 1 && rep.Status != ReplayBeyondWindow {
			t.Fatalf("step %d, evicted, was served: %+v", oldest-1, rep)
		}
	}

	w := NewWindow(100, 3*small)
	for k := uint64(1); k <= 5; k++ {
		w.Add(1, k, msg(k, 0))
	}
	check(w, 3, 3*small) // three fit
	if rep := served(w, 3, 5); len(rep.Steps) != 3 || !bytes.Equal(rep.Steps[0], msg(3, 0)) || !bytes.Equal(rep.Steps[2], msg(5, 0)) {
		t.Fatalf("served %d steps", len(rep.Steps))
	}
	w.Add(1, 6, msg(6, 8)) // worth two: steps 3 and 4 go
	check(w, 5, 3*small)
	w.Add(1, 7, msg(7, 20)) // over the budget on its own: kept alone
	check(w, 7, len(msg(7, 20)))
	if rep := served(w, 7, 7); len(rep.Steps) != 1 || !bytes.Equal(rep.Steps[0], msg(7, 20)) {
		t.Fatalf("the oversized newest step is not replayable: %+v", rep)
	}
	w.Add(1, 8, msg(8, 0)) // and the next step pushes it out
	check(w, 8, small)
	// A new epoch starts over, bytes included.
	w.Add(2, 1, testCodec.AppendStep(nil, &Step{Epoch: 2, Step: 1}))
	if w.Bytes() != small {
		t.Fatalf("after a new epoch the window holds %d bytes, want %d", w.Bytes(), small)
	}

	// The count bound still holds, and a full ring reuses a buffer only
	// when that does not pin much more than the new step needs.
	w = NewWindow(2, 1<<20)
	w.Add(1, 1, msg(1, 20))
	w.Add(1, 2, msg(2, 20))
	w.Add(1, 3, msg(3, 20)) // reuses step 1's buffer
	check(w, 2, 2*len(msg(1, 20)))
	w.Add(1, 4, msg(4, 0)) // step 2's buffer is far larger: released
	check(w, 3, len(msg(1, 20))+small)
}
