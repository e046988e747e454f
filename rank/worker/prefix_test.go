package worker

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tpcoord/tpcoord/rank"
	"github.com/tpcoord/tpcoord/rank/core"
)

// appendRow3 appends a version 3 row as the protocol lays it out.
func appendRow3(w []byte, id uint64, flags, pos, p uint32, toks []int32, blocks ...uint32) []byte {
	le := binary.LittleEndian
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
	return w
}

func iota32(from, n int) []int32 {
	s := make([]int32, n)
	for i := range s {
		s[i] = int32(from + i)
	}
	return s
}

// TestForward3Cached: a NEW row with a cached prefix is sent at position
// Cached with the tokens [Cached, Fed) and its whole table (the shared
// blocks first) to a worker with a pool; a worker without one gets it
// from 0 with no blocks, and a version 2 worker gets it whole.
func TestForward3Cached(t *testing.T) {
	a := &rank.Seq{ID: 5, Prompt: iota32(100, 12), Fed: 10, Cached: 8, Blocks: []core.BlockID{7, 3, 9}}
	b := &rank.Seq{ID: 6, Prompt: iota32(200, 5), Output: []int32{-8, 9}, Fed: 7, Cached: 4, Blocks: []core.BlockID{7, 4}}
	rows := []*rank.Seq{a, b}
	head := func(n uint32) []byte {
		le := binary.LittleEndian
		return le.AppendUint32(le.AppendUint32(le.AppendUint64(nil, 1), n), 0)
	}
	cases := []struct {
		name    string
		d       delta
		version uint32
		want    []byte
	}{
		{"pool", delta{chunked: true, paged: true, blockSize: 4}, ProtocolV3,
			appendRow3(appendRow3(head(2), 5, flagNew, 8, 12, iota32(108, 2), 7, 3, 9), 6, flagNew|flagSample, 4, 5, []int32{204, -8, 9}, 7, 4)},
		{"no pool", delta{chunked: true, blockSize: 4}, ProtocolV3,
			appendRow3(appendRow3(head(2), 5, flagNew, 0, 12, iota32(100, 10)), 6, flagNew|flagSample, 0, 5, append(iota32(200, 5), -8, 9))},
	}
	for _, tc := range cases {
		if err := tc.d.advance(1, 1, rows); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := body(t, appendForwardDelta(nil, tc.version, 1, tc.d.finished, rows, tc.d.plan), frameForward); !bytes.Equal(got, tc.want) {
			t.Errorf("%s: FORWARD body\n% x\nwant\n% x", tc.name, got, tc.want)
		}
	}
	d2 := delta{}
	if err := d2.advance(1, 1, rows[1:]); err != nil {
		t.Fatal(err)
	}
	if got := d2.plan[0]; got.known || got.from != 0 || got.to != 7 {
		t.Errorf("version 2 plan %+v, want the row whole from 0", got)
	}
}

// TestDeltaCachedRefuses: a NEW row's Cached must be below its Fed and,
// for a worker with a pool, a multiple of its block size.
func TestDeltaCachedRefuses(t *testing.T) {
	cases := []struct {
		name   string
		cached int
		paged  bool
		want   string
	}{
		{"negative", -4, true, "sequence 7: Cached -4 is not in [0, Fed 9)"},
		{"at Fed", 9, true, "sequence 7: Cached 9 is not in [0, Fed 9)"},
		{"beyond Fed without a pool", 12, false, "sequence 7: Cached 12 is not in [0, Fed 9)"},
		{"inside a block", 6, true, "sequence 7: Cached 6 is not a multiple of the worker's block size 4"},
		{"inside a block without a pool", 6, false, ""},
	}
	for _, tc := range cases {
		d := delta{chunked: true, paged: tc.paged, blockSize: 4}
		r := &rank.Seq{ID: 7, Prompt: make([]int32, 12), Fed: 9, Cached: tc.cached, Blocks: make([]core.BlockID, 3)}
		err := d.advance(1, 1, []*rank.Seq{r})
		if tc.want == "" {
			if err != nil || d.plan[0].from != 0 {
				t.Errorf("%s: plan %+v, %v; want the row from 0", tc.name, d.plan[0], err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}

// prefixScript plays, against a worker with a pool of 4-token blocks,
// rows that start after a cached prefix: B and C share the blocks of A,
// which is live; D shares A's after A left; E then takes (and overwrites)
// block 1, which held A's tokens [4, 8); F claims A's prefix in blocks 0
// and 1 again. cmp gets each step's batch and logits.
func prefixScript(step func(b rank.Batch, last bool)) {
	a := &rank.Seq{ID: 1, Prompt: iota32(40, 9), Blocks: []core.BlockID{0, 1, 2}}
	prefixed := func(id uint64, cached, n int, tail int32, blocks ...core.BlockID) *rank.Seq {
		r := &rank.Seq{ID: id, Prompt: append(slices.Clone(a.Prompt[:cached]), iota32(int(tail), n-cached)...), Cached: cached, Blocks: blocks}
		r.Fed = r.Len()
		return r
	}
	a.Fed = a.Len()
	b := prefixed(2, 8, 11, 300, 0, 1, 3)
	c := prefixed(3, 4, 10, 400, 0, 4)
	c.Fed = 6 // prefilled in chunks: [4, 6), then [6, 10)
	d := prefixed(4, 8, 10, 500, 0, 1, 5)
	e := &rank.Seq{ID: 5, Prompt: iota32(600, 6), Fed: 6, Blocks: []core.BlockID{1, 6}}
	f := prefixed(6, 8, 9, 700, 0, 1, 7)
	batches := [][]*rank.Seq{{a}, {a, b, c}, {b, c, d}, {c, e}, {c, e, f}}
	for i, rows := range batches {
		if i > 0 {
			for _, r := range batches[i-1] {
				if !r.Prefilling() {
					grow(r, int32(i))
				}
			}
		}
		if i == 2 {
			c.Fed, c.Blocks = c.Len(), append(c.Blocks, 8)
		}
		step(rank.Batch{Epoch: 1, Step: uint64(i + 1), Rows: rows}, i == len(batches)-1)
	}
}

// playPrefix runs prefixScript through an executor on cfg's worker and
// compares every sampled row's logits with the synthetic executor's for
// the row's whole history. reads says the worker reads cached prefixes
// back through the tables: then F's must differ (its prefix was
// overwritten); else (a worker sent every row from token 0) they match.
func playPrefix(t *testing.T, cfg Config, version uint32, reads bool) {
	t.Helper()
	w, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if got := w.ProtocolVersion(); got != version {
		t.Fatalf("negotiated version %d, want %d", got, version)
	}
	v := cfg.Vocab
	prefixScript(func(b rank.Batch, last bool) {
		got, err := w.Forward(context.Background(), b)
		if err != nil {
			t.Fatal(err)
		}
		want := wantLogits(t, v, cfg.EOS, cfg.DType, b)
		if !last || !reads {
			compareSampled(t, got, want, b, v, version < ProtocolV3)
			return
		}
		n := len(b.Rows) - 1 // F, after the rows that must match
		compareSampled(t, got[:n*v], want[:n*v], rank.Batch{Step: b.Step, Rows: b.Rows[:n]}, v, false)
		if g, w := got[n*v+int(cfg.EOS)], want[n*v+int(cfg.EOS)]; math.Float32bits(g) == math.Float32bits(w) {
			t.Errorf("F's EOS logit %v is the synthetic executor's for its own prompt: the worker did not read the overwritten block", g)
		}
	})
}

// TestWorkerPrefix: cached prefixes end to end with the Go worker: read
// back through the tables with a pool (and a wrong block shows), sent
// whole to a worker without a pool and to a version 2 worker.
func TestWorkerPrefix(t *testing.T) {
	cases := []struct {
		name    string
		sc      ServeConfig
		version uint32
		reads   bool
	}{
		{"pool", ServeConfig{KVBlocks: 16, BlockSize: 4}, ProtocolV3, true},
		{"no pool", ServeConfig{BlockSize: 4}, ProtocolV3, false},
		{"version 2", ServeConfig{MaxVersion: 2, KVBlocks: 16, BlockSize: 4}, ProtocolV2, false},
	}
	for _, tc := range cases {
		for _, dt := range []DType{Float32, BFloat16} {
			t.Run(fmt.Sprintf("%s/%v", tc.name, dt), func(t *testing.T) {
				sock := goWorker(t, tc.sc)
				cfg := Config{Rank: 0, World: 1, Vocab: 997, MaxBatch: 4, EOS: 3, DType: dt, Logits: true, Socket: sock, ShmDir: shortDir(t), BlockSize: 4}
				playPrefix(t, cfg, tc.version, tc.reads)
			})
		}
	}
}

// TestWorkerPythonPrefix: the same with the Python worker.
func TestWorkerPythonPrefix(t *testing.T) {
	for _, blocks := range []string{"16", "0"} {
		t.Run("blocks "+blocks, func(t *testing.T) {
			cfg := Config{Rank: 0, World: 1, Vocab: 997, MaxBatch: 4, EOS: 3, DType: Float16, Logits: true, BlockSize: 4,
				Command: pythonWorker(t, "--kv-blocks", blocks, "--block-size", "4"),
				Stderr:  os.Stderr, StartTimeout: time.Minute, ForwardTimeout: time.Minute}
			playPrefix(t, cfg, ProtocolV3, blocks != "0")
		})
	}
}

// TestApply3AllocatesNothing: a worker with a pool, once its blocks have
// been written and its sequences' buffers have grown, runs sequences that
// join (NEW, half of them after a cached prefix another one wrote a
// FORWARD before), decode a token a step (written at its slot, the history
// read back) and leave, without allocating.
func TestApply3AllocatesNothing(t *testing.T) {
	const rows, steps = 8, 26
	all := make([]row3, rows)
	for k := range all {
		r := &all[k]
		r.id, r.flags, r.prompt, r.tokens = uint64(k+1), ns, 6, 6
		for j := range 8 {
			r.blocks = append(r.blocks, uint32(8*k+j))
		}
		if k%2 == 1 { // after the prefix row k-1 wrote in its first block
			r.pos, r.tokens, r.blocks[0] = 4, 2, uint32(8*(k-1))
		}
	}
	var frames [][]byte
	for s := range steps {
		var batch []row3
		for k := range all {
			if k%2 == 1 && s == 0 {
				continue // joins at the second FORWARD
			}
			batch = append(batch, all[k])
			r := &all[k]
			r.flags, r.pos, r.tokens, r.blocks = flagSample, r.pos+uint32(r.tokens), 1, nil
		}
		var finished []uint64
		if s == 0 {
			finished = []uint64{1, 2, 3, 4, 5, 6, 7, 8}
		}
		frames = append(frames, body(t, forward3Frame(uint64(s+1), finished, batch...), frameForward))
	}
	s := &server{hello: hello{Version: ProtocolV3, MaxBatch: rows}, paged: newPaged(4, 64)}
	run := func() {
		for i, f := range frames {
			if _, got, err := s.apply3(f); err != nil || got[0] == nil {
				t.Fatalf("FORWARD %d: %v", i, err)
			}
		}
	}
	run()
	if allocs := testing.AllocsPerRun(5, run); allocs != 0 {
		t.Errorf("%v allocations per run of %d FORWARDs", allocs, len(frames))
	}
}
