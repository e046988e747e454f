package worker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/tpcoord/tpcoord/rank"
)

func TestWorkerHandshakeMismatch(t *testing.T) {
	cases := []struct {
		field string
		edit  func(h *hello)
		want  string
	}{
		{"version", func(h *hello) { h.Version = 9 }, "protocol version: agent has 1 to 3, worker has 9"},
		{"version 0", func(h *hello) { h.Version = 0 }, "protocol version: agent has 1 to 3, worker has 0"},
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

// TestWorkerLogits: the Go worker's logits through shared memory equal the
// synthetic executor's, for every dtype, in both protocol versions (a
// version 1 worker is the Go worker capped at 1), over steps where rows
// join and leave and the epoch changes.
func TestWorkerLogits(t *testing.T) {
	for _, version := range []uint32{ProtocolV1, ProtocolV2, ProtocolV3} {
		for _, dt := range []DType{Float32, Float16, BFloat16} {
			t.Run(fmt.Sprintf("v%d/%v", version, dt), func(t *testing.T) {
				const vocab = 5000
				sock := goWorker(t, ServeConfig{MaxVersion: version})
				shm := shortDir(t)
				cfg := Config{Rank: 0, World: 2, Vocab: vocab, MaxBatch: 8, EOS: 3, DType: dt, Logits: true, Socket: sock, ShmDir: shm}
				w, err := Start(context.Background(), cfg)
				if err != nil {
					t.Fatal(err)
				}
				defer w.Close()
				if got := w.ProtocolVersion(); got != version {
					t.Fatalf("negotiated version %d, want %d", got, version)
				}
				if ents, _ := os.ReadDir(shm); len(ents) != 0 {
					t.Errorf("shared-memory file still linked after the handshake: %v", ents)
				}
				newSession(vocab).play(func(b rank.Batch) {
					got, err := w.Forward(context.Background(), b)
					if err != nil {
						t.Fatal(err)
					}
					compareLogits(t, got, wantLogits(t, vocab, 3, dt, b), vocab)
				})
			})
		}
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

func pythonWorker(t testing.TB, args ...string) []string {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not found")
	}
	script, err := filepath.Abs("../../examples/worker/worker.py")
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{py, script, "--socket", "{socket}"}, args...)
}

// TestWorkerPython: the Python reference worker, started as a process,
// produces exactly the synthetic executor's logits at the default vocab,
// for every dtype, in version 2 and (capped with --max-version 1) in
// version 1; SIGKILL of the worker ends the next step with an error naming
// the rank and the signal.
func TestWorkerPython(t *testing.T) {
	cases := []struct {
		version uint32
		dt      DType
	}{{3, Float32}, {2, Float32}, {2, Float16}, {2, BFloat16}, {1, Float16}}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("v%d/%v", tc.version, tc.dt), func(t *testing.T) {
			dt := tc.dt
			vocab := 100352
			if dt != Float32 {
				vocab = 4099
			}
			cfg := Config{Rank: 0, World: 1, Vocab: vocab, MaxBatch: 32, EOS: 0, DType: dt, Logits: true,
				Command: pythonWorker(t, "--max-version", fmt.Sprint(tc.version)), Stderr: os.Stderr, StartTimeout: 2 * time.Minute, ForwardTimeout: time.Minute}
			w, err := Start(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			if got := w.ProtocolVersion(); got != tc.version {
				t.Fatalf("negotiated version %d, want %d", got, tc.version)
			}
			b := testBatch(1, 32)
			for i, r := range b.Rows { // long, varied histories
				for j := range 40 * i {
					grow(r, int32((j*7919+i*104729)%vocab))
				}
			}
			for step := range 2 {
				got, err := w.Forward(context.Background(), b)
				if err != nil {
					t.Fatal(err)
				}
				compareLogits(t, got, wantLogits(t, vocab, 0, dt, b), vocab)
				// The next step: five rows go on with one token each.
				b = rank.Batch{Step: uint64(step + 2), Rows: b.Rows[:5]}
				for i, r := range b.Rows {
					grow(r, int32(i*11+step))
				}
			}
			if dt != BFloat16 {
				return
			}
			if err := syscall.Kill(w.PID(), syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_, err = w.Forward(context.Background(), b)
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
			grow(r, int32((j*31+i)%1000))
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

// BenchmarkWorkerForward: rank 0, logits through shared memory. v1 sends
// the same 32 histories every step; v2 and v3 each row's one new token.
func BenchmarkWorkerForward(b *testing.B) {
	for _, v := range []uint32{ProtocolV1, ProtocolV2, ProtocolV3} {
		b.Run(fmt.Sprintf("v%d", v), func(b *testing.B) {
			benchWorker(b, Config{Rank: 0, World: 1, Vocab: 100352, MaxBatch: 32, EOS: 0, Logits: true, MaxVersion: v})
		})
	}
}

// BenchmarkWorkerRoundTrip is the protocol alone: a follower rank (no
// logits) with the same batches.
func BenchmarkWorkerRoundTrip(b *testing.B) {
	for _, v := range []uint32{ProtocolV1, ProtocolV2, ProtocolV3} {
		b.Run(fmt.Sprintf("v%d", v), func(b *testing.B) {
			benchWorker(b, Config{Rank: 1, World: 2, Vocab: 100352, MaxBatch: 32, EOS: 0, MaxVersion: v})
		})
	}
}

func benchWorker(b *testing.B, cfg Config) {
	cfg.Socket = goWorker(b, ServeConfig{})
	w, err := Start(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	batch := benchBatch()
	for b.Loop() {
		batch.Step++
		if cfg.MaxVersion >= ProtocolV2 {
			for _, r := range batch.Rows {
				grow(r, int32(batch.Step%1000))
			}
		}
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
