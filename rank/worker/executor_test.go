package worker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tpcoord/tpcoord/rank"
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

func TestWorkerHandshakeMismatch(t *testing.T) {
	cases := []struct {
		field string
		edit  func(h *hello)
		want  string
	}{
		{"version", func(h *hello) { h.Version = 9 }, "protocol version: agent has 1, worker has 9"},
		{"rank", func(h *hello) { h.Rank = 2 }, "rank: agent has 3, worker has 2"},
		{"world", func(h *hello) { h.World = 8 }, "world size: agent has 4, worker has 8"},
		{"vocab", func(h *hello) { h.Vocab = 100352 }, "vocab: agent has 64, worker has 100352"},
		{"max batch", func(h *hello) { h.MaxBatch = 32 }, "max batch: agent has 4, worker has 32"},
		{"eos", func(h *hello) { h.EOS = 2 }, "eos: agent has 0, worker has 2"},
		{"dtype", func(h *hello) { h.DType = BFloat16 }, "dtype: agent has float32, worker has bfloat16"},
		{"byte order", func(h *hello) { h.Order = 3 - nativeOrder }, "byte order: agent has " + orderName(nativeOrder) + ", worker has " + orderName(3-nativeOrder)},
	}
	for _, tc := range cases {
		t.Run(tc.field, func(t *testing.T) {
			sock := fakeWorker(t, func(c net.Conn) {
				if _, ok := handshakeOK(t, c, tc.edit); ok {
					drain(c)
				}
			})
			w, err := Start(context.Background(), testWorkerConfig(sock))
			if err == nil {
				w.Close()
			}
			mustContain(t, err, "rank 3", "refusing to start", tc.want)
		})
	}
	t.Run("worker refuses", func(t *testing.T) {
		sock := fakeWorker(t, func(c net.Conn) {
			readFrame(c, nil, maxRequestBody)
			c.Write(appendError(nil, "no card at slot 3"))
			drain(c)
		})
		_, err := Start(context.Background(), testWorkerConfig(sock))
		mustContain(t, err, "rank 3", "refused", "no card at slot 3")
	})
	t.Run("garbage reply", func(t *testing.T) {
		sock := fakeWorker(t, func(c net.Conn) {
			readFrame(c, nil, maxRequestBody)
			c.Write([]byte("HTTP/1.1 400 Bad Request\r\n\r\n"))
			drain(c)
		})
		_, err := Start(context.Background(), testWorkerConfig(sock))
		mustContain(t, err, "rank 3", "handshake", "not a worker protocol frame")
	})
}

// TestWorkerBadReplies: every kind of broken step reply ends the step with
// an error naming the rank, and the worker stays broken.
func TestWorkerBadReplies(t *testing.T) {
	cases := []struct {
		name  string
		reply func(c net.Conn, step uint64)
		want  string
	}{
		{"garbage bytes", func(c net.Conn, _ uint64) { c.Write([]byte("Traceback (most recent call last):\n")) }, "not a worker protocol frame"},
		{"huge length", func(c net.Conn, _ uint64) {
			c.Write(appendFrame(nil, frameForwardOK, nil)[:4])
			c.Write([]byte{0xff, 0xff, 0xff, 0x7f})
		}, "not a worker protocol frame"},
		{"wrong type", func(c net.Conn, _ uint64) { c.Write(appendFrame(nil, frameHelloOK, make([]byte, 40))) }, "HELLO_OK in reply to FORWARD"},
		{"wrong step", func(c net.Conn, step uint64) { c.Write(appendForwardOK(nil, step+1, 0)) }, "FORWARD_OK for step 8"},
		{"wrong rows", func(c net.Conn, step uint64) { c.Write(appendForwardOK(nil, step, 2)) }, "with 2 rows, want step 7 with 0 rows"},
		{"short body", func(c net.Conn, _ uint64) { c.Write(appendFrame(nil, frameForwardOK, []byte{1, 2, 3})) }, "FORWARD_OK of 3 bytes"},
		{"error frame", func(c net.Conn, _ uint64) { c.Write(appendError(nil, "CUDA out of memory")) }, `worker reported an error: "CUDA out of memory"`},
		{"closes mid-step", func(c net.Conn, _ uint64) { c.Close() }, "worker closed the connection"},
		{"closes mid-frame", func(c net.Conn, step uint64) { c.Write(appendForwardOK(nil, step, 0)[:10]); c.Close() }, "worker closed the connection"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sock := fakeWorker(t, func(c net.Conn) {
				if _, ok := handshakeOK(t, c, nil); !ok {
					return
				}
				typ, body, err := readFrame(c, nil, maxRequestBody)
				if err != nil || typ != frameForward {
					t.Errorf("fake worker: want FORWARD, got %s, %v", frameName(typ), err)
					return
				}
				tc.reply(c, leUint64(body))
				drain(c)
			})
			w, err := Start(context.Background(), testWorkerConfig(sock))
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			_, err = w.Forward(context.Background(), testBatch(7, 2))
			mustContain(t, err, "rank 3", "step 7", tc.want)
			_, again := w.Forward(context.Background(), testBatch(8, 2))
			if again == nil || again.Error() != err.Error() {
				t.Errorf("after a failed step: %v, want the same error again", again)
			}
		})
	}
}

// TestWorkerHangs: a worker that never answers ends the step at the
// deadline with an error naming the rank.
func TestWorkerHangs(t *testing.T) {
	sock := fakeWorker(t, func(c net.Conn) {
		if _, ok := handshakeOK(t, c, nil); ok {
			drain(c) // reads FORWARD, never answers
		}
	})
	cfg := testWorkerConfig(sock)
	cfg.ForwardTimeout = 50 * time.Millisecond
	w, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	_, err = w.Forward(context.Background(), testBatch(1, 1))
	mustContain(t, err, "rank 3", "step 1", "did not answer in time", "--forward-timeout 50ms")
}

// TestWorkerHandshakeHangs: a worker that accepts but never answers HELLO.
func TestWorkerHandshakeHangs(t *testing.T) {
	sock := fakeWorker(t, drain)
	cfg := testWorkerConfig(sock)
	cfg.StartTimeout = 50 * time.Millisecond
	_, err := Start(context.Background(), cfg)
	mustContain(t, err, "rank 3", "handshake", "did not answer in time", "start timeout 50ms")
}

// TestWorkerCancel: cancelling the step's context ends a hung step.
func TestWorkerCancel(t *testing.T) {
	got := make(chan struct{})
	sock := fakeWorker(t, func(c net.Conn) {
		if _, ok := handshakeOK(t, c, nil); ok {
			readFrame(c, nil, maxRequestBody)
			close(got)
			drain(c)
		}
	})
	w, err := Start(context.Background(), testWorkerConfig(sock))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-got; cancel() }()
	_, err = w.Forward(ctx, testBatch(1, 1))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Forward after cancel: %v", err)
	}
	mustContain(t, err, "rank 3")
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

// TestWorkerLogits: the Go worker's logits through shared memory equal the
// synthetic executor's, for every dtype, over several steps.
func TestWorkerLogits(t *testing.T) {
	for _, dt := range []DType{Float32, Float16, BFloat16} {
		t.Run(dt.String(), func(t *testing.T) {
			const vocab = 5000
			sock := goWorker(t, ServeConfig{})
			shm := shortDir(t)
			cfg := Config{Rank: 0, World: 2, Vocab: vocab, MaxBatch: 8, EOS: 3, DType: dt, Logits: true, Socket: sock, ShmDir: shm}
			w, err := Start(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			if ents, _ := os.ReadDir(shm); len(ents) != 0 {
				t.Errorf("shared-memory file still linked after the handshake: %v", ents)
			}
			for step, n := range []int{8, 3, 1, 8} {
				b := testBatch(uint64(step+1), n)
				got, err := w.Forward(context.Background(), b)
				if err != nil {
					t.Fatal(err)
				}
				compareLogits(t, got, wantLogits(t, vocab, 3, dt, b), vocab)
			}
		})
	}
}

// TestWorkerFollower: a rank without logits gets none and no shared memory.
func TestWorkerFollower(t *testing.T) {
	sock := goWorker(t, ServeConfig{})
	w, err := Start(context.Background(), testWorkerConfig(sock))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	got, err := w.Forward(context.Background(), testBatch(1, 4))
	if err != nil || got != nil {
		t.Fatalf("Forward on rank 3: %v, %v; want nil, nil", got, err)
	}
}

// TestWorkerServeMismatch: the Go worker reports its own values and the
// agent refuses them.
func TestWorkerServeMismatch(t *testing.T) {
	eos := int32(7)
	sock := goWorker(t, ServeConfig{Vocab: 128, EOS: &eos, DType: Float16})
	_, err := Start(context.Background(), testWorkerConfig(sock))
	mustContain(t, err, "rank 3", "vocab: agent has 64, worker has 128", "eos: agent has 0, worker has 7", "dtype: agent has float32, worker has float16")
}

// TestWorkerProcessExits: a worker command that exits before connecting
// fails the start with its exit status; one that never connects is killed
// and reaped at the start deadline.
func TestWorkerProcessExits(t *testing.T) {
	cfg := testWorkerConfig("")
	cfg.Command = []string{"sh", "-c", "exit 3"}
	_, err := Start(context.Background(), cfg)
	mustContain(t, err, "rank 3", "exited before connecting", "exit status 3")

	cfg.Command = []string{"sleep", "600"}
	cfg.StartTimeout = 100 * time.Millisecond
	_, err = Start(context.Background(), cfg)
	mustContain(t, err, "rank 3", "did not connect")
}

func pythonWorker(t testing.TB) []string {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not found")
	}
	script, err := filepath.Abs("../../examples/worker/worker.py")
	if err != nil {
		t.Fatal(err)
	}
	return []string{py, script, "--socket", "{socket}"}
}

// TestWorkerPython: the Python reference worker, started as a process,
// produces exactly the synthetic executor's logits at the default vocab,
// for every dtype; SIGKILL of the worker ends the next step with an error
// naming the rank and the signal.
func TestWorkerPython(t *testing.T) {
	cmd := pythonWorker(t)
	for _, dt := range []DType{Float32, Float16, BFloat16} {
		t.Run(dt.String(), func(t *testing.T) {
			vocab := 100352
			if dt != Float32 {
				vocab = 4099
			}
			cfg := Config{Rank: 0, World: 1, Vocab: vocab, MaxBatch: 32, EOS: 0, DType: dt, Logits: true,
				Command: cmd, Stderr: os.Stderr, StartTimeout: 2 * time.Minute, ForwardTimeout: time.Minute}
			w, err := Start(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			for step, n := range []int{32, 5} {
				b := testBatch(uint64(step+1), n)
				for i, r := range b.Rows { // long, varied histories
					for j := range 40 * i {
						r.Output = append(r.Output, int32((j*7919+i*104729)%vocab))
					}
				}
				got, err := w.Forward(context.Background(), b)
				if err != nil {
					t.Fatal(err)
				}
				compareLogits(t, got, wantLogits(t, vocab, 0, dt, b), vocab)
			}
			if dt != BFloat16 {
				return
			}
			if err := syscall.Kill(w.PID(), syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_, err = w.Forward(context.Background(), testBatch(3, 1))
			mustContain(t, err, "rank 0", fmt.Sprintf("pid %d", w.PID()), "step 3", "killed")
		})
	}
}

// Benchmarks: the worker executor's per-step cost against the in-process
// synthetic executor, at batch 32 and the default vocab. The difference is
// the protocol's overhead (encode FORWARD, two socket hops, decode).

func benchBatch() rank.Batch {
	b := testBatch(1, 32)
	for i, r := range b.Rows {
		for j := range 64 {
			r.Output = append(r.Output, int32((j*31+i)%1000))
		}
	}
	return b
}

func BenchmarkSyntheticForward(b *testing.B) {
	syn, err := rank.NewSynthetic(rank.SyntheticConfig{Vocab: 100352, EOS: 0, Logits: true})
	if err != nil {
		b.Fatal(err)
	}
	batch := benchBatch()
	for b.Loop() {
		if _, err := syn.Forward(context.Background(), batch); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkWorkerForward(b *testing.B) {
	sock := goWorker(b, ServeConfig{})
	w, err := Start(context.Background(), Config{Rank: 0, World: 1, Vocab: 100352, MaxBatch: 32, EOS: 0, Logits: true, Socket: sock})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	batch := benchBatch()
	for b.Loop() {
		batch.Step++
		if _, err := w.Forward(context.Background(), batch); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWorkerRoundTrip is the protocol alone: a follower rank (no
// logits) with the same batch.
func BenchmarkWorkerRoundTrip(b *testing.B) {
	sock := goWorker(b, ServeConfig{})
	w, err := Start(context.Background(), Config{Rank: 1, World: 2, Vocab: 100352, MaxBatch: 32, EOS: 0, Socket: sock})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	batch := benchBatch()
	for b.Loop() {
		batch.Step++
		if _, err := w.Forward(context.Background(), batch); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSyntheticIntoShm is the synthetic model writing its rows into a
// shared-memory mapping instead of the heap: the part of the worker's cost
// that is the memory, not the protocol.
func BenchmarkSyntheticIntoShm(b *testing.B) {
	const vocab = 100352
	syn, err := rank.NewSynthetic(rank.SyntheticConfig{Vocab: vocab, EOS: 0, Logits: true})
	if err != nil {
		b.Fatal(err)
	}
	region, err := createShm("/dev/shm", "bench-*.logits", 32*vocab*4)
	if err != nil {
		b.Fatal(err)
	}
	defer region.unlink()
	defer region.close()
	rw, err := openShm(region.path, 32*vocab*4)
	if err != nil {
		b.Fatal(err)
	}
	defer rw.close()
	out := rw.float32s(32 * vocab)
	batch := benchBatch()
	for b.Loop() {
		for i, r := range batch.Rows {
			syn.Row(r, out[i*vocab:(i+1)*vocab])
		}
	}
}
