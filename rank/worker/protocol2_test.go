package worker

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"net"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tpcoord/tpcoord/rank"
)

// syncBuffer is a log sink the test reads while the executor may write.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestNegotiation: the connection speaks the lower of the agent's offer
// and the worker's highest version, and the agent logs which at start.
func TestNegotiation(t *testing.T) {
	for _, agent := range []uint32{1, 2, 3} {
		for _, worker := range []uint32{1, 2, 3} {
			t.Run(fmt.Sprintf("agent%d/worker%d", agent, worker), func(t *testing.T) {
				var logs syncBuffer
				cfg := testWorkerConfig(goWorker(t, ServeConfig{MaxVersion: worker}))
				cfg.MaxVersion, cfg.Logger = agent, slog.New(slog.NewTextHandler(&logs, nil))
				w, err := Start(context.Background(), cfg)
				if err != nil {
					t.Fatal(err)
				}
				defer w.Close()
				want := min(agent, worker)
				if got := w.ProtocolVersion(); got != want {
					t.Errorf("ProtocolVersion() = %d, want %d", got, want)
				}
				line := regexp.MustCompile(fmt.Sprintf(`msg="worker connected" .*\bprotocol=%d\b`, want))
				if !line.MatchString(logs.String()) {
					t.Errorf("log does not match %s:\n%s", line, logs.String())
				}
				if _, err := w.Forward(context.Background(), testBatch(1, 3)); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
	if err := (&Config{Rank: 0, World: 1, Vocab: 8, MaxBatch: 1, Socket: "x", MaxVersion: 4}).Validate(); err == nil || !strings.Contains(err.Error(), "max version") {
		t.Errorf("MaxVersion 4: %v", err)
	}
}

// TestServeRefusesVersion0: a worker speaks no version below 1 and answers
// ERROR naming the versions it speaks.
func TestServeRefusesVersion0(t *testing.T) {
	for _, tc := range []struct {
		max  uint32
		want string
	}{{0, "protocol version 0 offered; this worker speaks 1 to 3"}, {2, "protocol version 0 offered; this worker speaks 1 to 2"}, {1, "protocol version 0 offered; this worker speaks 1"}} {
		served := make(chan error, 1)
		sock := fakeWorker(t, func(c net.Conn) { served <- Serve(context.Background(), c, ServeConfig{MaxVersion: tc.max}) })
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(appendHello(nil, &hello{Version: 0, World: 1, Vocab: 8, MaxBatch: 1, DType: Float32, Order: nativeOrder})); err != nil {
			t.Fatal(err)
		}
		typ, body, err := readFrame(c, nil, maxReplyBody)
		c.Close()
		if err != nil || typ != frameError || string(body) != tc.want {
			t.Errorf("reply to version 0: %s %q %v, want ERROR %q", frameName(typ), body, err, tc.want)
		}
		if err := <-served; err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Serve: %v", err)
		}
	}
}

// TestWorkerSessionV2Follower: a follower (no logits) over the script of
// steps where rows join and leave and the epoch changes. The Go worker
// checks every row against what it holds (NEW or known, position) and
// that the finished ids leave it holding exactly the batch; any slip in
// the agent's deltas fails the step.
func TestWorkerSessionV2Follower(t *testing.T) {
	const vocab = 300
	w, err := Start(context.Background(), Config{Rank: 1, World: 2, Vocab: vocab, MaxBatch: 8, EOS: 3, Socket: goWorker(t, ServeConfig{MaxVersion: 2})})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if w.ProtocolVersion() != ProtocolV2 {
		t.Fatalf("negotiated version %d", w.ProtocolVersion())
	}
	steps := 0
	newSession(vocab).play(func(b rank.Batch) {
		if logits, err := w.Forward(context.Background(), b); err != nil || logits != nil {
			t.Fatalf("epoch %d step %d: %v, %v", b.Epoch, b.Step, logits, err)
		}
		steps++
	})
	if steps != 11 {
		t.Errorf("%d steps played", steps)
	}
}

// TestEmptyBatchSendsNothing: an empty batch sends no FORWARD (rank 0 runs
// none); the next FORWARD finishes every id sent and sends its rows NEW:
// the gap in its steps shows that every row left the batch, so one that is
// back was admitted again.
func TestEmptyBatchSendsNothing(t *testing.T) {
	got := make(chan forward2, 4)
	sock := fakeWorker(t, func(c net.Conn) {
		if _, ok := handshakeOK(t, c, nil); !ok {
			return
		}
		for {
			typ, body, err := readFrame(c, nil, maxRequestBody)
			if err != nil || typ != frameForward {
				return
			}
			var f forward2
			if err := decodeForward2(body, 8, &f); err != nil {
				t.Errorf("fake worker: %v", err)
				return
			}
			got <- f
			c.Write(appendForwardOK(nil, f.Step, 0))
		}
	})
	cfg := testWorkerConfig(sock)
	cfg.MaxVersion = ProtocolV2
	w, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	a, b := seq(1, 2, 0), seq(2, 2, 0)
	for _, batch := range []rank.Batch{{Epoch: 1, Step: 1, Rows: []*rank.Seq{a, b}}, {Epoch: 1, Step: 2}, {Epoch: 1, Step: 3, Rows: []*rank.Seq{b}}} {
		grow(b, 5)
		if logits, err := w.Forward(context.Background(), batch); err != nil || logits != nil {
			t.Fatalf("step %d: %v, %v", batch.Step, logits, err)
		}
	}
	first, second := <-got, <-got
	if first.Step != 1 || second.Step != 3 || !slices.Equal(second.Finished, []uint64{1, 2}) || len(second.Rows) != 1 || !second.Rows[0].New {
		t.Errorf("FORWARDs: step %d, then step %d finishing %v with %+v", first.Step, second.Step, second.Finished, second.Rows)
	}
}

// tamperConn edits the agent's frames on their way to the worker.
type tamperConn struct {
	net.Conn
	edit func(frame []byte)
}

func (c *tamperConn) Write(b []byte) (int, error) {
	b = slices.Clone(b)
	c.edit(b)
	return c.Conn.Write(b)
}

// protocolErrorCases break the agent's delta state (or its frame) before
// step 2 of a batch of sequences 1, 2 and 3, each a rule a version 2 worker
// enforces; want is what the worker's ERROR says.
var protocolErrorCases = []struct {
	name   string
	tamper func(w *Executor, b *rank.Batch)
	want   string
}{
	{"NEW on a known id", func(w *Executor, _ *rank.Batch) {
		w.delta.held = slices.DeleteFunc(w.delta.held, func(h heldSeq) bool { return h.id == 2 })
	}, "sequence 2 is flagged NEW but this worker already holds it"},
	{"known row of an unknown id", func(w *Executor, b *rank.Batch) {
		b.Rows = append(b.Rows, seq(9, 3, 0))
		w.delta.held = append(w.delta.held, heldSeq{id: 9, tokens: 1})
	}, "sequence 9 is not flagged NEW but this worker does not hold it"},
	{"position differs", func(w *Executor, _ *rank.Batch) {
		w.delta.held[1].tokens-- // sequence 2 holds 3 tokens
	}, "sequence 2 continues at position 2, this worker holds 3 of its tokens"},
	{"unknown flag bits", func(w *Executor, _ *rank.Batch) {
		w.conn = &tamperConn{Conn: w.conn, edit: func(f []byte) {
			if binary.LittleEndian.Uint16(f[4:]) == frameForward {
				f[frameHeaderSize+forward2HeadSize+8] |= 4 // row 0's flags (no finished ids)
			}
		}}
	}, "unknown flag bits 0x4"},
}

// runProtocolErrors plays each case against the worker start gives and
// checks the agent's error names the rank, the step and the rule.
func runProtocolErrors(t *testing.T, start func(t *testing.T, want string) *Executor) {
	for _, tc := range protocolErrorCases {
		t.Run(tc.name, func(t *testing.T) {
			w := start(t, tc.want)
			defer w.Close()
			b := rank.Batch{Epoch: 1, Step: 1, Rows: []*rank.Seq{seq(1, 2, 0), seq(2, 3, 0), seq(3, 1, 0)}}
			if _, err := w.Forward(context.Background(), b); err != nil {
				t.Fatal(err)
			}
			for _, r := range b.Rows {
				grow(r, 7)
			}
			b.Step = 2
			tc.tamper(w, &b)
			_, err := w.Forward(context.Background(), b)
			mustContain(t, err, "rank 1", "step 2", "worker reported an error", tc.want)
		})
	}
}

// TestProtocolErrorsGo: the Go worker refuses each broken FORWARD with
// ERROR, and the agent's step fails naming the rank.
func TestProtocolErrorsGo(t *testing.T) {
	runProtocolErrors(t, func(t *testing.T, want string) *Executor {
		sock := fakeWorker(t, func(c net.Conn) {
			if err := Serve(context.Background(), c, ServeConfig{}); err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("Serve: %v, want an error containing %q", err, want)
			}
		})
		w, err := Start(context.Background(), Config{Rank: 1, World: 2, Vocab: 64, MaxBatch: 4, EOS: 0, Socket: sock})
		if err != nil {
			t.Fatal(err)
		}
		return w
	})
}

// TestProtocolErrorsPython: the same with the Python reference worker.
func TestProtocolErrorsPython(t *testing.T) {
	cmd := pythonWorker(t)
	runProtocolErrors(t, func(t *testing.T, _ string) *Executor {
		w, err := Start(context.Background(), Config{Rank: 1, World: 2, Vocab: 64, MaxBatch: 4, EOS: 0,
			Command: cmd, Stderr: os.Stderr, StartTimeout: time.Minute, ForwardTimeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return w
	})
}

// TestWorkerPythonSession: the Python reference worker, in version 2 and
// capped at version 1, gives the synthetic logits over the script of steps
// where rows join and leave and the epoch changes.
func TestWorkerPythonSession(t *testing.T) {
	for _, version := range []uint32{ProtocolV1, ProtocolV2, ProtocolV3} {
		t.Run(fmt.Sprintf("v%d", version), func(t *testing.T) {
			const vocab = 4099
			cfg := Config{Rank: 0, World: 1, Vocab: vocab, MaxBatch: 8, EOS: 3, DType: BFloat16, Logits: true,
				Command: pythonWorker(t, "--max-version", fmt.Sprint(version)), Stderr: os.Stderr, StartTimeout: time.Minute, ForwardTimeout: time.Minute}
			w, err := Start(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			if got := w.ProtocolVersion(); got != version {
				t.Fatalf("negotiated version %d, want %d", got, version)
			}
			newSession(vocab).play(func(b rank.Batch) {
				got, err := w.Forward(context.Background(), b)
				if err != nil {
					t.Fatal(err)
				}
				compareLogits(t, got, wantLogits(t, vocab, 3, BFloat16, b), vocab)
			})
		})
	}
}
