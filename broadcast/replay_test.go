package broadcast

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

func TestReplayRequestRoundTrip(t *testing.T) {
	want := ReplayRequest{Epoch: 3, Rank: 7, From: 10, To: 99}
	msg := AppendReplayRequest(nil, testJobHash, &want)
	var got ReplayRequest
	if err := DecodeReplayRequest(msg, testJobHash, &got); err != nil || got != want {
		t.Fatalf("got %+v, %v; want %+v", got, err, want)
	}
	for _, bad := range []ReplayRequest{{From: 0, To: 5}, {From: 6, To: 5}} {
		msg := AppendReplayRequest(nil, testJobHash, &bad)
		if err := DecodeReplayRequest(msg, testJobHash, &got); !errors.Is(err, ErrBounds) {
			t.Errorf("range %d..%d: err = %v, want ErrBounds", bad.From, bad.To, err)
		}
	}
	for n := range len(msg) {
		if err := DecodeReplayRequest(msg[:n], testJobHash, &got); err == nil {
			t.Fatalf("truncated to %d bytes: no error", n)
		}
	}
	if err := DecodeReplayRequest(msg, testJobHash+1, &got); !errors.Is(err, ErrJob) {
		t.Errorf("other job: err = %v, want ErrJob", err)
	}
}

func TestReplayReplyRoundTrip(t *testing.T) {
	s1 := AppendStep(nil, testJobHash, &Step{Epoch: 2, Step: 5})
	s2 := AppendStep(nil, testJobHash, &Step{Epoch: 2, Step: 6, Admitted: []Admission{{Seq: 1, Prompt: []int32{1, 2}}}})
	want := ReplayReply{Epoch: 2, Status: ReplayOK, Oldest: 3, Steps: [][]byte{s1, s2}}
	msg := AppendReplayReply(nil, testJobHash, &want)
	var got ReplayReply
	if err := DecodeReplayReply(msg, testJobHash, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for n := range len(msg) {
		if err := DecodeReplayReply(msg[:n], testJobHash, &got); err == nil {
			t.Fatalf("truncated to %d bytes: no error", n)
		}
	}
	// A step length beyond the bytes present, with a valid checksum.
	bad := append([]byte(nil), msg[:len(msg)-4]...)
	bad[replayReplyFixed] = 0xff
	if err := DecodeReplayReply(reseal(bad), testJobHash, &got); !errors.Is(err, ErrShort) {
		t.Errorf("oversized step length: err = %v, want ErrShort", err)
	}
}

// TestWindow: the window serves consecutive steps from the oldest kept,
// refuses what it no longer has, bounds a reply's size, and starts over
// in a new epoch.
func TestWindow(t *testing.T) {
	w := NewWindow(4)
	if rep := w.Serve(&ReplayRequest{From: 1, To: 1}, 1<<20); rep.Status != ReplayBeyondWindow {
		t.Fatalf("empty window: %+v", rep)
	}
	msg := func(k uint64) []byte { return AppendStep(nil, testJobHash, &Step{Epoch: 1, Step: k}) }
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
	w.Add(2, 1, AppendStep(nil, testJobHash, &Step{Epoch: 2, Step: 1}))
	if rep := w.Serve(&ReplayRequest{Epoch: 2, From: 1, To: 1}, 1<<20); rep.Status != ReplayOK || rep.Oldest != 1 {
		t.Errorf("after a new epoch: %+v", rep)
	}
}

func FuzzDecodeReplayRequest(f *testing.F) {
	f.Add(AppendReplayRequest(nil, testJobHash, &ReplayRequest{Epoch: 1, Rank: 2, From: 3, To: 4}))
	f.Add([]byte("TPCR"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var r ReplayRequest
		if err := DecodeReplayRequest(b, testJobHash, &r); err != nil {
			return
		}
		if again := AppendReplayRequest(nil, testJobHash, &r); !bytes.Equal(again, b) {
			t.Fatalf("re-encoding differs")
		}
	})
}

func FuzzDecodeReplayReply(f *testing.F) {
	s := AppendStep(nil, testJobHash, &Step{Epoch: 1, Step: 2, Tokens: []Token{{Seq: 1, Token: 3}}})
	f.Add(AppendReplayReply(nil, testJobHash, &ReplayReply{Epoch: 1, Oldest: 1, Steps: [][]byte{s, s}}))
	f.Add(AppendReplayReply(nil, testJobHash, &ReplayReply{Status: ReplayBeyondWindow}))
	f.Fuzz(func(t *testing.T, b []byte) {
		var r ReplayReply
		if err := DecodeReplayReply(b, testJobHash, &r); err != nil {
			return
		}
		if again := AppendReplayReply(nil, testJobHash, &r); !bytes.Equal(again, b) {
			t.Fatalf("re-encoding differs")
		}
		var st Step
		for _, s := range r.Steps {
			_ = DecodeStep(s, testJobHash, &st) // must not panic
		}
	})
}
