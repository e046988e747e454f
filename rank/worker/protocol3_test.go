package worker

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tpcoord/tpcoord/rank"
	"github.com/tpcoord/tpcoord/rank/core"
)

// TestHelloOK3: version 3's HELLO_OK carries the block pool after the
// name (12 bytes), earlier versions nothing; the executor reports it.
func TestHelloOK3(t *testing.T) {
	h := hello{Version: 3, World: 1, Vocab: 8, MaxBatch: 2, DType: Float32, Order: nativeOrder, PID: 7, Name: "w",
		BlockSize: 16, Blocks: 1000, MaxModelLen: 4096}
	b := body(t, appendHelloOK(nil, &h), frameHelloOK)
	if len(b) != helloOKFixedSize+1+12 || binary.LittleEndian.Uint32(b[35:]) != 16 || binary.LittleEndian.Uint32(b[39:]) != 1000 || binary.LittleEndian.Uint32(b[43:]) != 4096 {
		t.Fatalf("HELLO_OK v3 body % x", b)
	}
	var got hello
	if err := decodeHelloOK(b, &got); err != nil || got != h {
		t.Fatalf("decoded %+v, %v", got, err)
	}
	if err := decodeHelloOK(b[:len(b)-1], &got); err == nil || !strings.Contains(err.Error(), "want 47") {
		t.Errorf("short v3 HELLO_OK: %v", err)
	}
	h.Version = 2
	if b := body(t, appendHelloOK(nil, &h), frameHelloOK); len(b) != helloOKFixedSize+1 {
		t.Errorf("HELLO_OK v2 of %d bytes", len(b))
	}

	sock := goWorker(t, ServeConfig{KVBlocks: 1000, BlockSize: 16, MaxModelLen: 4096})
	cfg := testWorkerConfig(sock)
	cfg.BlockSize = 16
	w, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if got, want := w.KVCapacity(), (rank.KVCapacity{BlockSize: 16, Blocks: 1000, MaxModelLen: 4096}); w.ProtocolVersion() != 3 || got != want {
		t.Errorf("version %d, capacity %+v, want 3, %+v", w.ProtocolVersion(), got, want)
	}
	w2, err := Start(context.Background(), testWorkerConfig(goWorker(t, ServeConfig{MaxVersion: 2, KVBlocks: 1000})))
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	if got := w2.KVCapacity(); got != (rank.KVCapacity{}) {
		t.Errorf("version 2 worker's capacity %+v, want zero", got)
	}
}

// TestHelloOK3Mismatch: a worker with a pool must use the agent's block
// size; one without a pool is not checked.
func TestHelloOK3Mismatch(t *testing.T) {
	cases := []struct {
		agent int
		sc    ServeConfig
		want  string
	}{
		{16, ServeConfig{KVBlocks: 100, BlockSize: 32}, "block size: agent has 16, worker has 32"},
		{16, ServeConfig{KVBlocks: 0, BlockSize: 32}, ""},
		{0, ServeConfig{KVBlocks: 100, BlockSize: 32}, ""},
	}
	for _, tc := range cases {
		cfg := testWorkerConfig(goWorker(t, tc.sc))
		cfg.BlockSize = tc.agent
		w, err := Start(context.Background(), cfg)
		if tc.want == "" {
			if err != nil {
				t.Errorf("agent %d, worker %+v: %v", tc.agent, tc.sc, err)
			} else {
				w.Close()
			}
			continue
		}
		mustContain(t, err, "rank 3", "refusing to start", tc.want)
	}
	sock := fakeWorker(t, func(c net.Conn) {
		if _, ok := handshakeOK(t, c, func(h *hello) { h.Blocks, h.BlockSize = 5, 0 }); ok {
			drain(c)
		}
	})
	_, err := Start(context.Background(), testWorkerConfig(sock))
	mustContain(t, err, "rank 3", "block size: worker has 0 with 5 blocks")
}

// TestForward3Encoding: a version 3 FORWARD, byte by byte: a finished id,
// a NEW row with blocks, known rows of one token with no and one new
// block, and a NEW row prefilled in part (no SAMPLE).
func TestForward3Encoding(t *testing.T) {
	a := &rank.Seq{ID: 5, Prompt: []int32{1, 2, 3, 4, 5}, Fed: 5, Blocks: []core.BlockID{7, 3}}
	b := &rank.Seq{ID: 6, Prompt: []int32{1, 2, 3, 4, 5, 6}, Output: []int32{-8}, Fed: 7, Blocks: []core.BlockID{4, 5}}
	c := &rank.Seq{ID: 8, Prompt: []int32{9, 9, 9, 9, 9, 9, 9}, Output: []int32{1, 2}, Fed: 9, Blocks: []core.BlockID{1, 2, 6}}
	d := &rank.Seq{ID: 2, Prompt: make([]int32, 10), Fed: 4, Blocks: []core.BlockID{0}}
	for i := range d.Prompt {
		d.Prompt[i] = int32(20 + i)
	}
	dl := delta{chunked: true, paged: true, started: true, epoch: 1, step: 4,
		held: []heldSeq{{id: 6, tokens: 6, blocks: 2}, {id: 8, tokens: 8, blocks: 2}, {id: 9, tokens: 3, blocks: 1}}}
	rows := []*rank.Seq{a, b, c, d}
	if err := dl.advance(1, 5, rows); err != nil {
		t.Fatal(err)
	}
	got := body(t, appendForward3(nil, 5, dl.finished, rows, dl.plan), frameForward)

	le := binary.LittleEndian
	w := le.AppendUint64(nil, 5) // step
	w = le.AppendUint32(w, 4)    // n
	w = le.AppendUint32(w, 1)    // f
	w = le.AppendUint64(w, 9)    // finished
	row := func(id uint64, flags, pos, p uint32, toks []int32, blocks ...uint32) {
		w = le.AppendUint64(w, id)
		for _, v := range []uint32{flags, pos, p, uint32(len(toks)), uint32(len(blocks))} {
			w = le.AppendUint32(w, v)
		}
		for _, tk := range toks {
			w = le.AppendUint32(w, uint32(tk))
		}
		for _, bl := range blocks {
			w = le.AppendUint32(w, bl)
		}
	}
	row(5, flagNew|flagSample, 0, 5, []int32{1, 2, 3, 4, 5}, 7, 3)
	row(6, flagSample, 6, 6, []int32{-8})
	row(8, flagSample, 8, 7, []int32{2}, 6)
	row(2, flagNew, 0, 10, []int32{20, 21, 22, 23}, 0)
	if !bytes.Equal(got, w) {
		t.Fatalf("FORWARD v3 body\n% x\nwant\n% x", got, w)
	}
	if len(got) != 16+8+(28+5*4+2*4)+(28+4)+(28+4+4)+(28+4*4+4) {
		t.Errorf("%d bytes", len(got))
	}
	var f forward2
	if err := decodeForwardDelta(got, 4, ProtocolV3, &f); err != nil || len(f.Rows) != 4 || f.Rows[3].Sample || !f.Rows[2].Sample || !slices.Equal(f.Rows[2].Blocks, []uint32{6}) {
		t.Fatalf("decoded %+v, %v", f, err)
	}
}

// TestDelta3Refuses: the agent's own checks of a version 3 row.
func TestDelta3Refuses(t *testing.T) {
	cases := []struct {
		name string
		row  *rank.Seq
		want string
	}{
		{"nothing to feed", &rank.Seq{ID: 7, Prompt: make([]int32, 4), Fed: 3, Blocks: make([]core.BlockID, 2)}, "sequence 7: Fed 3 and the worker holds 3 of its tokens: nothing to feed"},
		{"Fed beyond the length", &rank.Seq{ID: 7, Prompt: make([]int32, 4), Fed: 5, Blocks: make([]core.BlockID, 2)}, "sequence 7: Fed 5 is beyond its 4 tokens"},
		{"table shrank", &rank.Seq{ID: 7, Prompt: make([]int32, 4), Fed: 4}, "sequence 7: table of 0 blocks, the worker was sent 1"},
		{"NEW with nothing fed", &rank.Seq{ID: 8, Prompt: make([]int32, 4)}, "sequence 8: Fed 0 and the worker holds 0"},
	}
	for _, tc := range cases {
		d := delta{chunked: true, paged: true}
		if err := d.advance(1, 1, []*rank.Seq{{ID: 7, Prompt: make([]int32, 4), Fed: 3, Blocks: make([]core.BlockID, 1)}}); err != nil {
			t.Fatal(err)
		}
		err := d.advance(1, 2, []*rank.Seq{tc.row})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}

// TestEncodeForward3AllocatesNothing: version 3's steady state, rows
// growing a token and now and then a block, one joining and one leaving
// per step, costs no allocation once the buffers have grown.
func TestEncodeForward3AllocatesNothing(t *testing.T) {
	w := &Executor{version: ProtocolV3, delta: delta{chunked: true, paged: true}}
	rows := make([]*rank.Seq, 33)
	for i := range rows {
		rows[i] = seq(uint64(i), 100, 0)
		rows[i].Output = make([]int32, 0, 1<<12)
		rows[i].Blocks = make([]core.BlockID, 7, 1<<10)
	}
	step := uint64(0)
	run := func() {
		step++
		for _, r := range rows[:32] {
			grow(r, 1)
			if r.Fed > len(r.Blocks)*16 {
				r.Blocks = append(r.Blocks, core.BlockID(step))
			}
		}
		i := int(step % 32) // swap a row out for the spare: one leaves, one joins
		rows[i], rows[32] = rows[32], rows[i]
		rows[i].Output, rows[i].Blocks = rows[i].Output[:0], rows[i].Blocks[:7]
		rows[i].Fed = rows[i].Len()
		if _, err := w.encodeForward(1, step, rows[:32]); err != nil {
			t.Fatal(err)
		}
	}
	for range 10 {
		run()
	}
	if allocs := testing.AllocsPerRun(1000, run); allocs != 0 {
		t.Errorf("%v allocations per step", allocs)
	}
}

// row3 is one row of a hand-built version 3 FORWARD.
type row3 struct {
	id         uint64
	flags, pos uint32
	prompt     uint32
	tokens     int // T tokens (values 1, 2, …)
	blocks     []uint32
}

func forward3Frame(step uint64, finished []uint64, rows ...row3) []byte {
	le := binary.LittleEndian
	b, at := beginFrame(nil, frameForward)
	b = le.AppendUint64(b, step)
	b = le.AppendUint32(b, uint32(len(rows)))
	b = le.AppendUint32(b, uint32(len(finished)))
	for _, id := range finished {
		b = le.AppendUint64(b, id)
	}
	for _, r := range rows {
		b = le.AppendUint64(b, r.id)
		for _, v := range []uint32{r.flags, r.pos, r.prompt, uint32(r.tokens), uint32(len(r.blocks))} {
			b = le.AppendUint32(b, v)
		}
		for k := range r.tokens {
			b = le.AppendUint32(b, uint32(k+1))
		}
		for _, bl := range r.blocks {
			b = le.AppendUint32(b, bl)
		}
	}
	return endFrame(b, at)
}

const ns = flagNew | flagSample

// rules3 are FORWARD sequences a version 3 worker with 8 blocks of 4
// tokens (0 blocks where noPool) must refuse at the last step, naming the
// id or block; want "" means it must accept all of them.
var rules3 = []struct {
	name   string
	noPool bool
	steps  [][]byte
	want   string
}{
	{"block id not below the pool", false, [][]byte{forward3Frame(1, nil, row3{id: 1, flags: ns, prompt: 1, tokens: 1, blocks: []uint32{8}})},
		"row 0: sequence 1: block 8 is not below this worker's 8 blocks"},
	{"a block written while in another live table", false, [][]byte{forward3Frame(1, nil,
		row3{id: 1, flags: ns, prompt: 1, tokens: 1, blocks: []uint32{0}}, row3{id: 2, flags: ns, prompt: 1, tokens: 1, blocks: []uint32{0}})},
		"row 0: sequence 1 writes block 0, which is also in the table of sequence 2"},
	{"block twice in one table", false, [][]byte{forward3Frame(1, nil, row3{id: 1, flags: ns, prompt: 5, tokens: 5, blocks: []uint32{3, 3}})},
		"row 0: sequence 1: block 3 is already in the table of sequence 1"},
	{"block of a live table taken later", false, [][]byte{
		forward3Frame(1, nil, row3{id: 1, flags: ns, prompt: 1, tokens: 1, blocks: []uint32{4}}, row3{id: 2, flags: ns, prompt: 1, tokens: 1, blocks: []uint32{5}}),
		forward3Frame(2, nil, row3{id: 1, flags: flagSample, pos: 1, prompt: 1, tokens: 4, blocks: []uint32{5}}, row3{id: 2, flags: flagSample, pos: 1, prompt: 1, tokens: 1})},
		"row 0: sequence 1 writes block 5, which is also in the table of sequence 2"},
	{"a NEW row writes a block it shares", false, [][]byte{
		forward3Frame(1, nil, row3{id: 1, flags: ns, prompt: 8, tokens: 8, blocks: []uint32{0, 1}}),
		forward3Frame(2, nil, row3{id: 1, flags: flagSample, pos: 8, prompt: 8, tokens: 1, blocks: []uint32{2}},
			row3{id: 2, flags: ns, pos: 4, prompt: 5, tokens: 1, blocks: []uint32{0, 1}})},
		"row 1: sequence 2 writes block 1, which is also in the table of sequence 1"},
	{"a block shared while another row of the FORWARD writes it", false, [][]byte{
		forward3Frame(1, nil, row3{id: 1, flags: flagNew, prompt: 6, tokens: 3, blocks: []uint32{0}}),
		forward3Frame(2, nil, row3{id: 2, flags: ns, pos: 4, prompt: 5, tokens: 1, blocks: []uint32{0, 1}},
			row3{id: 1, pos: 3, prompt: 6, tokens: 1})},
		"row 1: sequence 1 writes block 0, which is also in the table of sequence 2"},
	{"a cached prefix never written", false, [][]byte{forward3Frame(1, nil, row3{id: 1, flags: ns, pos: 4, prompt: 5, tokens: 1, blocks: []uint32{3, 4}})},
		"row 0: sequence 1 reads block 3, whose slot 0 (its token 0) was never written"},
	{"a cached prefix partly written", false, [][]byte{
		forward3Frame(1, nil, row3{id: 1, flags: flagNew, prompt: 9, tokens: 6, blocks: []uint32{3, 4}}),
		forward3Frame(2, []uint64{1}, row3{id: 2, flags: ns, pos: 8, prompt: 9, tokens: 1, blocks: []uint32{3, 4, 5}})},
		"row 0: sequence 2 reads block 4, whose slot 2 (its token 6) was never written"},
	{"NEW inside a block", false, [][]byte{
		forward3Frame(1, nil, row3{id: 1, flags: ns, prompt: 4, tokens: 4, blocks: []uint32{0}}),
		forward3Frame(2, nil, row3{id: 1, flags: flagSample, pos: 4, prompt: 4, tokens: 1, blocks: []uint32{1}},
			row3{id: 2, flags: ns, pos: 2, prompt: 3, tokens: 1, blocks: []uint32{0}})},
		"row 1: sequence 2: NEW at position 2, not a multiple of the block size 4"},
	{"NEW after a prefix without a pool", true, [][]byte{forward3Frame(1, nil, row3{id: 1, flags: ns, pos: 4, prompt: 5, tokens: 1})},
		"row 0: sequence 1: NEW at position 4, and this worker keeps no paged cache (0 blocks) to hold a cached prefix"},
	{"cached prefixes shared read only, by live and finished tables", false, [][]byte{
		forward3Frame(1, nil, row3{id: 1, flags: ns, prompt: 9, tokens: 9, blocks: []uint32{0, 1, 2}}),
		forward3Frame(2, nil, row3{id: 1, flags: flagSample, pos: 9, prompt: 9, tokens: 1},
			row3{id: 2, flags: ns, pos: 8, prompt: 9, tokens: 2, blocks: []uint32{0, 1, 3}},
			row3{id: 3, flags: ns, pos: 4, prompt: 7, tokens: 3, blocks: []uint32{0, 4}}),
		forward3Frame(3, []uint64{1, 2}, row3{id: 3, flags: flagSample, pos: 7, prompt: 7, tokens: 1, blocks: []uint32{5}},
			row3{id: 4, flags: ns, pos: 8, prompt: 12, tokens: 4, blocks: []uint32{0, 1, 6}})}, ""},
	{"NEW table too short", false, [][]byte{forward3Frame(1, nil, row3{id: 1, flags: ns, prompt: 5, tokens: 5, blocks: []uint32{0}})},
		"row 0: sequence 1: a table of 1 blocks of 4 tokens does not cover its 5 tokens"},
	{"known table too short", false, [][]byte{
		forward3Frame(1, nil, row3{id: 1, flags: ns, prompt: 4, tokens: 4, blocks: []uint32{0}}),
		forward3Frame(2, nil, row3{id: 1, flags: flagSample, pos: 4, prompt: 4, tokens: 1})},
		"row 0: sequence 1: a table of 1 blocks of 4 tokens does not cover its 5 tokens"},
	{"blocks to a worker without a pool", true, [][]byte{forward3Frame(1, nil, row3{id: 1, flags: ns, prompt: 1, tokens: 1, blocks: []uint32{0}})},
		"row 0: sequence 1 brings 1 blocks, this worker keeps no paged cache (0 blocks)"},
	{"position is not what is held", false, [][]byte{
		forward3Frame(1, nil, row3{id: 1, flags: flagNew, prompt: 6, tokens: 2, blocks: []uint32{0, 1}}),
		forward3Frame(2, nil, row3{id: 1, pos: 3, prompt: 6, tokens: 1})},
		"sequence 1 continues at position 3, this worker holds 2 of its tokens"},
	{"NEW on a held id", false, [][]byte{
		forward3Frame(1, nil, row3{id: 1, flags: ns, prompt: 1, tokens: 1, blocks: []uint32{0}}),
		forward3Frame(2, nil, row3{id: 1, flags: ns, prompt: 1, tokens: 1, blocks: []uint32{1}})},
		"sequence 1 is flagged NEW but this worker already holds it"},
	{"known row of an unknown id", false, [][]byte{forward3Frame(1, nil, row3{id: 4, flags: flagSample, pos: 2, prompt: 1, tokens: 1, blocks: []uint32{0}})},
		"sequence 4 is not flagged NEW but this worker does not hold it"},
	{"T = 0", false, [][]byte{forward3Frame(1, nil, row3{id: 1, flags: flagNew, prompt: 1, blocks: []uint32{0}})}, "no tokens (T = 0)"},
	{"sampled before the prompt's end", false, [][]byte{forward3Frame(1, nil, row3{id: 1, flags: ns, prompt: 5, tokens: 3, blocks: []uint32{0}})},
		"sampled with a 5-token prompt in 3 tokens"},
	{"unknown flag bits", false, [][]byte{forward3Frame(1, nil, row3{id: 1, flags: 4 | ns, prompt: 1, tokens: 1, blocks: []uint32{0}})}, "unknown flag bits 0x4"},
	{"left without finishing", false, [][]byte{
		forward3Frame(1, nil, row3{id: 1, flags: ns, prompt: 1, tokens: 1, blocks: []uint32{0}}),
		forward3Frame(2, nil, row3{id: 2, flags: ns, prompt: 1, tokens: 1, blocks: []uint32{1}})},
		"holds 2 sequences, the batch has 1 rows"},
	{"a finished id's blocks pass on in the same FORWARD", false, [][]byte{
		forward3Frame(1, nil, row3{id: 1, flags: flagNew, prompt: 9, tokens: 8, blocks: []uint32{6, 2}}),
		forward3Frame(2, []uint64{1, 77}, row3{id: 2, flags: ns, prompt: 5, tokens: 5, blocks: []uint32{2, 6}}),
		forward3Frame(3, nil, row3{id: 2, flags: flagSample, pos: 5, prompt: 5, tokens: 4, blocks: []uint32{0}})}, ""},
}

// runRules3 plays rules3 against workers that connect (the socket is the
// one dial returns): HELLO offering 3, then the steps.
func runRules3(t *testing.T, start func(t *testing.T, noPool bool) net.Conn) {
	for _, tc := range rules3 {
		t.Run(tc.name, func(t *testing.T) {
			c := start(t, tc.noPool)
			defer c.Close()
			if _, err := c.Write(appendHello(nil, &hello{Version: 3, World: 1, Vocab: 64, MaxBatch: 4, EOS: 0, DType: Float32, Order: nativeOrder})); err != nil {
				t.Fatal(err)
			}
			var h hello
			if typ, b, err := readFrame(c, nil, maxReplyBody); err != nil || typ != frameHelloOK || decodeHelloOK(b, &h) != nil || h.Version != 3 {
				t.Fatalf("HELLO_OK: %s %q %v", frameName(typ), b, err)
			}
			for i, frame := range tc.steps {
				if _, err := c.Write(frame); err != nil {
					t.Fatal(err)
				}
				typ, b, err := readFrame(c, nil, maxReplyBody)
				last := i == len(tc.steps)-1
				switch {
				case err != nil:
					t.Fatalf("step %d: %v", i+1, err)
				case last && tc.want != "":
					if typ != frameError || !strings.Contains(string(b), tc.want) {
						t.Fatalf("step %d: %s %q, want ERROR containing %q", i+1, frameName(typ), b, tc.want)
					}
				case typ != frameForwardOK:
					t.Fatalf("step %d: %s %q", i+1, frameName(typ), b)
				}
			}
		})
	}
}

// TestRules3Go: `tpcoord worker` (Serve) refuses each broken FORWARD.
func TestRules3Go(t *testing.T) {
	runRules3(t, func(t *testing.T, noPool bool) net.Conn {
		sc := ServeConfig{KVBlocks: 8, BlockSize: 4}
		if noPool {
			sc.KVBlocks = 0
		}
		sock := fakeWorker(t, func(c net.Conn) { _ = Serve(context.Background(), c, sc) })
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		return c
	})
}

// TestRules3Python: the same with the Python reference worker.
func TestRules3Python(t *testing.T) {
	argv := pythonWorker(t)
	runRules3(t, func(t *testing.T, noPool bool) net.Conn {
		sock := filepath.Join(shortDir(t), "a.sock")
		ln, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		args := slices.Clone(argv[1:])
		args[2] = sock
		args = append(args, "--block-size", "4", "--kv-blocks", "8")
		if noPool {
			args[len(args)-1] = "0"
		}
		cmd := exec.Command(argv[0], args...)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		_ = ln.(*net.UnixListener).SetDeadline(time.Now().Add(time.Minute))
		c, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		return c
	})
}

// TestWorkerSessionChunked: over a script of steps with prompts prefilled
// in chunks (3 tokens a step), tables growing from a pool of 4-token
// blocks that rows leaving give back, and an epoch change, every worker
// gives the synthetic executor's logits for the rows fed whole. Version 3
// workers get every row, with its blocks, and check every table; version
// 1 and 2 workers (the Go worker capped) get no prefilling row, and its
// logits row is zero.
func TestWorkerSessionChunked(t *testing.T) {
	const vocab = 3001
	for _, version := range []uint32{ProtocolV1, ProtocolV2, ProtocolV3} {
		for _, dt := range []DType{Float32, BFloat16} {
			t.Run(fmt.Sprintf("v%d/%v", version, dt), func(t *testing.T) {
				sock := goWorker(t, ServeConfig{MaxVersion: version, KVBlocks: 64, BlockSize: 4})
				cfg := Config{Rank: 0, World: 2, Vocab: vocab, MaxBatch: 8, EOS: 3, DType: dt, Logits: true, Socket: sock, ShmDir: shortDir(t), BlockSize: 4}
				playChunked(t, cfg, version)
			})
		}
	}
}

// TestWorkerPythonSessionChunked: the same with the Python worker.
func TestWorkerPythonSessionChunked(t *testing.T) {
	const vocab = 3001
	for _, version := range []uint32{ProtocolV2, ProtocolV3} {
		t.Run(fmt.Sprintf("v%d", version), func(t *testing.T) {
			cfg := Config{Rank: 0, World: 1, Vocab: vocab, MaxBatch: 8, EOS: 3, DType: Float16, Logits: true, BlockSize: 4,
				Command: pythonWorker(t, "--max-version", fmt.Sprint(version), "--kv-blocks", "64", "--block-size", "4"),
				Stderr:  os.Stderr, StartTimeout: time.Minute, ForwardTimeout: time.Minute}
			playChunked(t, cfg, version)
		})
	}
}

func playChunked(t *testing.T, cfg Config, version uint32) {
	t.Helper()
	w, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if got := w.ProtocolVersion(); got != version {
		t.Fatalf("negotiated version %d, want %d", got, version)
	}
	prefilled := 0
	kvSession(cfg.Vocab, 3, 4, 64).play(func(b rank.Batch) {
		for _, r := range b.Rows {
			if r.Prefilling() {
				prefilled++
			}
		}
		got, err := w.Forward(context.Background(), b)
		if err != nil {
			t.Fatal(err)
		}
		compareSampled(t, got, wantLogits(t, cfg.Vocab, cfg.EOS, cfg.DType, b), b, cfg.Vocab, version < ProtocolV3)
	})
	if prefilled < 5 {
		t.Errorf("the script prefilled %d rows in part", prefilled)
	}
}

// TestLegacyForwards: what a version 1 or 2 worker is sent for a batch
// with a prefilling row: not that row, until the step where it is fed
// whole (then NEW, or its whole history); FORWARD_OK counts the rows sent.
func TestLegacyForwards(t *testing.T) {
	for _, version := range []uint32{ProtocolV1, ProtocolV2} {
		t.Run(fmt.Sprintf("v%d", version), func(t *testing.T) {
			got := make(chan []uint64, 4)
			sock := fakeWorker(t, func(c net.Conn) {
				if _, ok := handshakeOK(t, c, func(h *hello) { h.Version = version }); !ok {
					return
				}
				for {
					typ, b, err := readFrame(c, nil, maxRequestBody)
					if err != nil || typ != frameForward {
						return
					}
					step, ids := legacyRows(t, version, b)
					got <- ids
					c.Write(appendForwardOK(nil, step, 0))
				}
			})
			w, err := Start(context.Background(), testWorkerConfig(sock))
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			a, p, c := seq(1, 3, 0), seq(2, 9, 0), seq(3, 2, 0)
			p.Fed, p.Blocks = 4, []core.BlockID{0}
			steps := []struct {
				rows []*rank.Seq
				want []uint64 // ids sent; nil: no FORWARD
			}{
				{[]*rank.Seq{a, p, c}, []uint64{1, 3}},
				{[]*rank.Seq{p}, nil},
				{[]*rank.Seq{a, p}, []uint64{1, 2}},
			}
			for i, st := range steps {
				if i == 2 {
					p.Fed = p.Len()
				}
				if _, err := w.Forward(context.Background(), rank.Batch{Epoch: 1, Step: uint64(i + 1), Rows: st.rows}); err != nil {
					t.Fatal(err)
				}
				if st.want == nil {
					continue
				}
				if ids := <-got; !slices.Equal(ids, st.want) {
					t.Errorf("step %d: rows %v, want %v", i+1, ids, st.want)
				}
			}
		})
	}
}

// legacyRows decodes a version 1 or 2 FORWARD body into its row ids; a
// version 2 row must be NEW with the whole sequence (the script sends no
// sequence twice but after a gap, which starts the deltas over).
func legacyRows(t *testing.T, version uint32, b []byte) (uint64, []uint64) {
	var ids []uint64
	if version == ProtocolV1 {
		step, rows, err := decodeForward(b, 8, nil)
		if err != nil {
			t.Errorf("fake worker: %v", err)
		}
		for _, r := range rows {
			ids = append(ids, r.ID)
		}
		return step, ids
	}
	var f forward2
	if err := decodeForward2(b, 8, &f); err != nil {
		t.Errorf("fake worker: %v", err)
	}
	for _, r := range f.Rows {
		if !r.New {
			t.Errorf("fake worker: row of sequence %d not NEW", r.ID)
		}
		ids = append(ids, r.ID)
	}
	return f.Step, ids
}

// TestWorkerSessionV3Follower: a follower (no logits) with a pool over
// the chunked script: the Go worker checks every row and table.
func TestWorkerSessionV3Follower(t *testing.T) {
	const vocab = 300
	sock := goWorker(t, ServeConfig{KVBlocks: 64, BlockSize: 4})
	w, err := Start(context.Background(), Config{Rank: 1, World: 2, Vocab: vocab, MaxBatch: 8, EOS: 3, Socket: sock, BlockSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	kvSession(vocab, 3, 4, 64).play(func(b rank.Batch) {
		if logits, err := w.Forward(context.Background(), b); err != nil || logits != nil {
			t.Fatalf("epoch %d step %d: %v, %v", b.Epoch, b.Step, logits, err)
		}
	})
}
