package worker

import (
	"context"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tpcoord/tpcoord/rank"
	"github.com/tpcoord/tpcoord/rank/core"
)

// shortDir is a fresh directory with a short path: Unix socket paths are
// limited to ~108 bytes, which t.TempDir() under a long test name exceeds.
func shortDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "tw")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// fakeWorker listens on a socket and runs serve on the first connection in
// a goroutine that the test's cleanup waits for. serve must return once the
// agent closes the connection.
func fakeWorker(t testing.TB, serve func(c net.Conn)) string {
	t.Helper()
	sock := filepath.Join(shortDir(t), "w.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		c, err := ln.Accept()
		ln.Close()
		if err != nil {
			return
		}
		defer c.Close()
		serve(c)
	})
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	return sock
}

// goWorker serves Serve on a socket (an in-process Go worker).
func goWorker(t testing.TB, cfg ServeConfig) string {
	t.Helper()
	return fakeWorker(t, func(c net.Conn) {
		if err := Serve(context.Background(), c, cfg); err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
}

// handshakeOK reads HELLO and answers HELLO_OK after edit changes the echo.
func handshakeOK(t testing.TB, c net.Conn, edit func(h *hello)) (hello, bool) {
	typ, body, err := readFrame(c, nil, maxRequestBody)
	if err != nil || typ != frameHello {
		t.Errorf("fake worker: want HELLO, got %s, %v", frameName(typ), err)
		return hello{}, false
	}
	var h hello
	if err := decodeHello(body, &h); err != nil {
		t.Errorf("fake worker: %v", err)
		return h, false
	}
	echo := h
	echo.PID, echo.Name = 4242, "fake"
	if edit != nil {
		edit(&echo)
	}
	if _, err := c.Write(appendHelloOK(nil, &echo)); err != nil {
		return h, false
	}
	return h, true
}

// drain reads frames until the agent closes the connection.
func drain(c net.Conn) {
	for {
		if _, _, err := readFrame(c, nil, maxRequestBody); err != nil {
			return
		}
	}
}

func testWorkerConfig(sock string) Config {
	return Config{Rank: 3, World: 4, Vocab: 64, MaxBatch: 4, EOS: 0, Socket: sock, ForwardTimeout: time.Minute, StartTimeout: time.Minute}
}

func testBatch(step uint64, n int) rank.Batch {
	b := rank.Batch{Step: step}
	for i := range n {
		s := &rank.Seq{ID: uint64(100 + i), Prompt: []int32{int32(1 + 7*i), int32(2 + 3*i)}}
		for j := range i * 5 {
			s.Output = append(s.Output, int32((11*j+i)%60))
		}
		s.Fed = s.Len()
		b.Rows = append(b.Rows, s)
	}
	return b
}

func mustContain(t *testing.T, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one containing %q", parts)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not contain %q", err, p)
		}
	}
}

// wantLogits is Synthetic's output for b, rounded through dt.
func wantLogits(t testing.TB, vocab int, eos int32, dt DType, b rank.Batch) []float32 {
	syn, err := rank.NewSynthetic(rank.SyntheticConfig{Vocab: vocab, EOS: eos, Logits: true})
	if err != nil {
		t.Fatal(err)
	}
	out, err := syn.Forward(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	if dt != Float32 {
		h := make([]uint16, len(out))
		narrow(h, out, dt)
		widen(out, h, dt)
	}
	return out
}

func compareLogits(t *testing.T, got, want []float32, vocab int) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d logits, want %d", len(got), len(want))
	}
	bad := 0
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			if bad < 5 {
				t.Errorf("row %d token %d: %v, want %v", i/vocab, i%vocab, got[i], want[i])
			}
			bad++
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d logits differ", bad, len(want))
	}
}

// compareSampled compares the logits of b's rows that are fed whole (the
// ones rank 0 samples); zero says the others must be zero (a worker of
// version 1 or 2, which is not sent them), else they are not looked at.
func compareSampled(t *testing.T, got, want []float32, b rank.Batch, vocab int, zero bool) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d logits, want %d", len(got), len(want))
	}
	for i, r := range b.Rows {
		g, w := got[i*vocab:(i+1)*vocab], want[i*vocab:(i+1)*vocab]
		switch {
		case !r.Prefilling():
			compareLogits(t, g, w, vocab)
		case zero && slices.ContainsFunc(g, func(x float32) bool { return x != 0 }):
			t.Fatalf("step %d row %d (sequence %d, prefilling): logits not zero", b.Step, i, r.ID)
		}
	}
}

// session stands in for a rank's mirror over many steps: every step each
// row gets one token, some rows leave and some join (a few resumed with
// output tokens already), and newEpoch re-forms the world (steps restart
// at 1, the kept rows come back as new sequences with all their tokens).
//
// With chunk > 0 a joining row is fed chunk tokens a step until it is fed
// whole (it gets no token meanwhile), as rank 0 prefills long prompts in
// chunks; with a block pool (kvSession) every row's table grows to cover
// what it is fed, from a free list that reuses the blocks of rows that left
// first.
type session struct {
	epoch  uint32
	step   uint64
	nextID uint64
	rows   []*rank.Seq
	vocab  int32
	chunk  int
	bs     int
	free   []core.BlockID
}

func newSession(vocab int) *session { return &session{epoch: 1, nextID: 1000, vocab: int32(vocab)} }

// kvSession is a session with chunked prefill and a pool of blocks of bs.
func kvSession(vocab, chunk, bs, blocks int) *session {
	s := newSession(vocab)
	s.chunk, s.bs = chunk, bs
	for b := blocks - 1; b >= 0; b-- {
		s.free = append(s.free, core.BlockID(b))
	}
	return s
}

// advance runs one step: a token for every row fed whole (the others are
// fed another chunk), then leave rows go (every other one from the front),
// then join rows come.
func (s *session) advance(join, leave int) rank.Batch {
	s.step++
	for i, r := range s.rows {
		if r.Prefilling() {
			r.Fed = min(r.Len(), r.Fed+s.chunk)
			continue
		}
		r.Output = append(r.Output, int32((uint64(len(r.Output))*7919+r.ID*31+uint64(i))%uint64(s.vocab)))
		r.Fed = r.Len()
	}
	for k := 0; k < leave && len(s.rows) > 0; k++ {
		at := min(2*k, len(s.rows)-1)
		s.release(s.rows[at])
		s.rows = slices.Delete(s.rows, at, at+1)
	}
	for range join {
		id := s.nextID
		s.nextID++
		r := &rank.Seq{ID: id}
		for j := range 2 + id%9 {
			r.Prompt = append(r.Prompt, int32((id*104729+j*13)%uint64(s.vocab)))
		}
		if id%3 == 0 { // resumed: it already has output
			for j := range id % 5 {
				r.Output = append(r.Output, int32((id+j)%uint64(s.vocab)))
			}
		}
		s.admit(r)
	}
	return s.batch()
}

// admit adds r to the batch, fed its first chunk.
func (s *session) admit(r *rank.Seq) {
	r.Fed = r.Len()
	if s.chunk > 0 {
		r.Fed = min(r.Len(), s.chunk)
	}
	s.rows = append(s.rows, r)
}

func (s *session) release(r *rank.Seq) {
	for i := len(r.Blocks) - 1; i >= 0; i-- {
		s.free = append(s.free, r.Blocks[i])
	}
	r.Blocks = nil
}

// batch grows every row's table to cover what it is fed.
func (s *session) batch() rank.Batch {
	for _, r := range s.rows {
		for s.bs > 0 && len(r.Blocks)*s.bs < r.Fed {
			n := len(s.free) - 1
			r.Blocks = append(r.Blocks, s.free[n])
			s.free = s.free[:n]
		}
	}
	return rank.Batch{Epoch: s.epoch, Step: s.step, Rows: slices.Clone(s.rows)}
}

// newEpoch keeps the first keep rows, as fresh sequences with their tokens.
func (s *session) newEpoch(keep int) {
	s.epoch++
	s.step = 0
	kept := s.rows[:min(keep, len(s.rows))]
	for _, r := range s.rows {
		s.release(r)
	}
	s.rows = nil
	for _, r := range kept {
		s.admit(&rank.Seq{ID: r.ID, Prompt: slices.Clone(r.Prompt), Output: slices.Clone(r.Output)})
	}
}

// play runs a script of steps over s, calling step with each batch before
// the next one changes the rows: joins, leaves, resumed rows and an epoch
// change, never more than 8 rows.
func (s *session) play(step func(b rank.Batch)) {
	for _, jl := range [][2]int{{5, 0}, {0, 0}, {2, 1}, {0, 3}, {4, 0}, {0, 0}, {1, 2}} {
		step(s.advance(jl[0], jl[1]))
	}
	s.newEpoch(3)
	for _, jl := range [][2]int{{0, 0}, {3, 0}, {0, 1}, {0, 0}} {
		step(s.advance(jl[0], jl[1]))
	}
}
