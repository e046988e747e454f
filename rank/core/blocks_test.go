package core

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/internal/fielderr"
)

func mustBlocks(t *testing.T, cfg KVConfig) *Blocks {
	t.Helper()
	b, err := NewBlocks(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// queue is b's free blocks in the order allocation takes them.
func queue(b *Blocks) []BlockID {
	var out []BlockID
	for id := b.head; id != none; id = b.next[id] {
		out = append(out, BlockID(id))
	}
	return out
}

func check(t *testing.T, b *Blocks) {
	t.Helper()
	if err := b.Check(); err != nil {
		t.Fatal(err)
	}
}

func TestKVConfigValidate(t *testing.T) {
	for _, c := range []KVConfig{{BlockSize: 0, Blocks: 4}, {BlockSize: 16, Blocks: 0}, {BlockSize: 16, Blocks: 4, Watermark: 4}, {BlockSize: 16, Blocks: 4, Watermark: -1}} {
		if c.Validate() == nil {
			t.Errorf("%+v accepted", c)
		}
	}
	if err := (KVConfig{BlockSize: 16, Blocks: 4, Watermark: 3}).Validate(); err != nil {
		t.Error(err)
	}
	if n := (KVConfig{BlockSize: 16}).Need(33); n != 3 {
		t.Errorf("33 tokens in blocks of 16: %d blocks, want 3", n)
	}
}

// TestBlocksGrowAndRelease: a table grows a block at a time as its tokens
// cross block boundaries, all or nothing, and releasing it frees its
// blocks, which are reused least recently freed first.
func TestBlocksGrowAndRelease(t *testing.T) {
	b := mustBlocks(t, KVConfig{BlockSize: 4, Blocks: 5, Watermark: 1})
	if add, ok := b.Grow(1, 5); !ok || !slices.Equal(add, []BlockID{0, 1}) {
		t.Fatalf("grow to 5 tokens: %v %v, want blocks 0 1", add, ok)
	}
	if add, ok := b.Grow(1, 8); !ok || len(add) != 0 {
		t.Fatalf("grow to 8 tokens: %v %v, want nothing new", add, ok)
	}
	if add, ok := b.Grow(2, 12); !ok || !slices.Equal(add, []BlockID{2, 3, 4}) || b.Free() != 0 {
		t.Fatalf("grow 2 to 12 tokens: %v %v, free %d", add, ok, b.Free())
	}
	if add, ok := b.Grow(1, 9); ok || add != nil || len(b.Table(1)) != 2 {
		t.Fatalf("grow with nothing free: %v %v, table %v: want refused, unchanged", add, ok, b.Table(1))
	}
	check(t, b)
	b.Release(2)
	if b.Free() != 3 || b.Used() != 2 || b.Table(2) != nil {
		t.Fatalf("after release: free %d used %d table %v", b.Free(), b.Used(), b.Table(2))
	}
	b.Release(1)
	if add, _ := b.Grow(3, 4); !slices.Equal(add, []BlockID{4}) {
		t.Fatalf("reuse: %v, want block 4 (freed first: a table is released from its end)", add)
	}
	check(t, b)
	if b.CanAdmit(16) || !b.CanAdmit(12) {
		t.Fatalf("4 free, watermark 1: admit 16 tokens %v (want no), 12 tokens %v (want yes)", b.CanAdmit(16), b.CanAdmit(12))
	}
}

// TestBlocksSharedCounts: a block read by two sequences stays held until
// the last of them lets go; sharing needs held blocks and an empty table.
func TestBlocksSharedCounts(t *testing.T) {
	b := mustBlocks(t, KVConfig{BlockSize: 2, Blocks: 4})
	b.Grow(1, 4) // blocks 0 1
	if err := b.Share(2, b.Table(1)[:1]); err != nil {
		t.Fatal(err)
	}
	b.Grow(2, 4) // its own second block
	if !slices.Equal(b.Table(2), []BlockID{0, 2}) {
		t.Fatalf("table 2: %v", b.Table(2))
	}
	b.Release(1)
	if b.Free() != 2 || slices.Contains(queue(b), 0) {
		t.Fatalf("block 0 freed while sequence 2 still reads it: free %v", queue(b))
	}
	check(t, b)
	if err := b.Share(3, []BlockID{1}); err == nil {
		t.Fatal("shared a free block")
	}
	if err := b.Share(2, []BlockID{0}); err == nil {
		t.Fatal("shared into a table that holds blocks")
	}
	b.Release(2)
	if b.Free() != 4 {
		t.Fatalf("free %d, want 4", b.Free())
	}
	check(t, b)
}

// TestBlocksCheckCatches: the invariant check finds a count that drifts.
func TestBlocksCheckCatches(t *testing.T) {
	b := mustBlocks(t, KVConfig{BlockSize: 2, Blocks: 4})
	b.Grow(1, 4)
	b.refs[0]++
	if b.Check() == nil {
		t.Fatal("a count above its holders passed")
	}
}

// kvStepper is a stepper whose "model" is a pure function of a row's
// tokens, as tpcoord's counter-based sampling is of (prompt, parameters,
// seed, position): a row recomputed after a preemption must then go on
// with exactly the tokens it would have had.
func modelToken(r *Seq) int32 {
	h := uint64(len(r.Output))*0x9e3779b97f4a7c15 + uint64(r.Prompt[0])
	h ^= h >> 29
	h *= 0xbf58476d1ce4e5b9
	return int32(h>>40) % 50
}

func (s *stepper) sampleModel() []Event {
	rows := s.mirror.Rows()
	tokens := make([]int32, len(rows))
	for i, r := range rows {
		tokens[i] = modelToken(r)
	}
	return s.sched.Sampled(rows, tokens, nil)
}

// undisturbed is what r's output must be: the model's tokens from its
// prompt, to its first stop or its max_tokens.
func undisturbed(r *Request, eos int32) []int32 {
	seq := &Seq{Prompt: r.Prompt}
	for len(seq.Output) < r.MaxTokens {
		tok := modelToken(seq)
		seq.Output = append(seq.Output, tok)
		if tok == eos && !r.Params.IgnoreEOS && len(seq.Output) >= r.Params.MinTokens {
			break
		}
	}
	return seq.Output
}

// TestSchedulerKVPreemptsNewest: when a running row needs a block and
// none is free, the most recently admitted request is preempted: its row
// is removed in that step (with its last token), it waits at the front of
// the queue with its tokens, nothing is admitted in that step, and it is
// re-admitted with its output once blocks are free; its tokens are those
// of an undisturbed run.
func TestSchedulerKVPreemptsNewest(t *testing.T) {
	kv := KVConfig{BlockSize: 4, Blocks: 4}
	s := newStepper(t, SchedulerConfig{MaxBatch: 4, MaxQueue: 4, EOS: -1, KV: &kv})
	a := &Request{Prompt: []int32{1, 1, 1}, MaxTokens: 9, Params: greedyIgnoreEOS()}
	b := &Request{Prompt: []int32{2, 2, 2, 2, 2}, MaxTokens: 6, Params: greedyIgnoreEOS()}
	for _, r := range []*Request{a, b} {
		if err := s.sched.Submit(r); err != nil {
			t.Fatal(err)
		}
	}
	var preemptStep uint64
	for range 40 {
		st := s.next()
		if st == nil {
			break
		}
		if slices.Contains(st.Removed, b.Seq) && b.Finish == "" {
			preemptStep = st.Step
			if len(st.Admitted) != 0 || s.sched.waiting[0] != b || s.sched.Preemptions() != 1 {
				t.Fatalf("step %d preempted b: admitted %v, queue head %v, preemptions %d", st.Step, st.Admitted, s.sched.waiting[0].Seq, s.sched.Preemptions())
			}
		}
		if preemptStep != 0 && st.Step > preemptStep && len(st.Admitted) > 0 && !slices.Equal(st.Admitted[0].Output, b.Output) {
			t.Fatalf("b re-admitted with %v, it had %v", st.Admitted[0].Output, b.Output)
		}
		check(t, s.sched.Blocks())
		s.sampleModel()
	}
	if preemptStep == 0 {
		t.Fatal("b was never preempted: the pool was meant to run out")
	}
	for _, r := range []*Request{a, b} {
		if want := undisturbed(r, -1); r.Finish != "length" || !slices.Equal(r.Output, want) {
			t.Errorf("seq %d: %s %v, undisturbed %v", r.Seq, r.Finish, r.Output, want)
		}
	}
	if s.sched.Blocks().Used() != 0 {
		t.Fatalf("%d blocks held after every request finished", s.sched.Blocks().Used())
	}
}

func greedyIgnoreEOS() (p api.Params) {
	p.IgnoreEOS = true
	return p
}

// TestSchedulerKVAdmission: the head of the queue waits until its blocks
// fit beside the watermark, and nobody overtakes it; a request that could
// never fit is refused, naming max_tokens.
func TestSchedulerKVAdmission(t *testing.T) {
	kv := KVConfig{BlockSize: 4, Blocks: 6, Watermark: 1}
	s := newStepper(t, SchedulerConfig{MaxBatch: 4, MaxQueue: 4, EOS: -1, KV: &kv})
	big := &Request{Prompt: make([]int32, 12), MaxTokens: 8}  // 3 blocks now, 5 at most
	head := &Request{Prompt: make([]int32, 12), MaxTokens: 4} // 3 blocks: 3 free - 1 watermark = 2
	small := &Request{Prompt: make([]int32, 2), MaxTokens: 2}
	for _, r := range []*Request{big, head, small} {
		if err := s.sched.Submit(r); err != nil {
			t.Fatal(err)
		}
	}
	st := s.next()
	if len(st.Admitted) != 1 || st.Admitted[0].Seq != big.Seq {
		t.Fatalf("admitted %v, want the first alone (the next waits for blocks, the last may not overtake it)", st.Admitted)
	}
	err := s.sched.Submit(&Request{Prompt: make([]int32, 10), MaxTokens: 11})
	var fe *fielderr.Error
	if !errors.Is(err, ErrNeverFits) || !errors.As(err, &fe) || fe.Field != "max_tokens" {
		t.Fatalf("21 tokens in a pool of 5 admissible blocks of 4: %v", err)
	}
}

// TestSchedulerKVRandomNoLeak: 10,000 random requests through a pool a
// fraction of their needs, with random cancels: the block invariant holds
// at every step, every request ends, every one that was not cancelled has
// exactly its undisturbed tokens (however often it was preempted), and no
// block is held at the end.
func TestSchedulerKVRandomNoLeak(t *testing.T) {
	rng := rand.New(rand.NewPCG(35, 1))
	kv := KVConfig{BlockSize: 4, Blocks: 24, Watermark: 1}
	s := newStepper(t, SchedulerConfig{MaxBatch: 8, MaxQueue: 64, EOS: 7, KV: &kv})
	var all []*Request
	for step := 0; len(all) < 10000 || !s.sched.Idle(); step++ {
		if step > 400000 {
			t.Fatal("the load did not finish")
		}
		for len(all) < 10000 && rng.IntN(2) == 0 {
			r := &Request{Prompt: []int32{int32(rng.IntN(1000)), 1, 2}[:1+rng.IntN(3)], MaxTokens: 1 + rng.IntN(40), Tag: strconv.Itoa(len(all))}
			r.Params.IgnoreEOS = rng.IntN(3) == 0
			if err := s.sched.Submit(r); errors.Is(err, ErrOverloaded) {
				break
			} else if err != nil {
				t.Fatal(err)
			}
			all = append(all, r)
		}
		if len(all) > 0 && rng.IntN(50) == 0 {
			s.sched.Cancel(all[rng.IntN(len(all))].Tag, errors.New("cancelled"))
		}
		if s.next() != nil {
			s.sampleModel()
		}
		check(t, s.sched.Blocks())
	}
	if s.sched.Preemptions() == 0 {
		t.Fatal("no preemption: the pool was meant to be too small")
	}
	for _, r := range all {
		if r.Finish == "cancelled" {
			continue
		}
		if want := undisturbed(r, 7); !slices.Equal(r.Output, want) {
			t.Fatalf("seq %d (%s): %v, undisturbed %v", r.Seq, r.Finish, r.Output, want)
		}
	}
	if used := s.sched.Blocks().Used(); used != 0 {
		t.Fatalf("%d blocks held after every request ended", used)
	}
	t.Logf("%d requests, %d preemptions, %d steps", len(all), s.sched.Preemptions(), s.k)
}

// TestSchedulerMaxModelLen: a request longer than the model's context is
// refused in vLLM's words, naming the limit and both parts; one at the
// limit is taken.
func TestSchedulerMaxModelLen(t *testing.T) {
	s := mustScheduler(t, SchedulerConfig{MaxBatch: 4, MaxQueue: 4, EOS: -1, MaxModelLen: 16})
	err := s.Submit(&Request{Prompt: make([]int32, 10), MaxTokens: 7})
	var fe *fielderr.Error
	if !errors.Is(err, ErrNeverFits) || !errors.As(err, &fe) || fe.Field != "max_tokens" ||
		!strings.Contains(err.Error(), "max_tokens: This model's maximum context length is 16 tokens. However, you requested 17 tokens (10 in the prompt, 7 in the completion)") {
		t.Fatalf("17 tokens against a context of 16: %v", err)
	}
	if err := s.Submit(&Request{Prompt: make([]int32, 10), MaxTokens: 6}); err != nil {
		t.Fatalf("16 tokens against a context of 16: %v", err)
	}
}
