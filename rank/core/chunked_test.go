package core

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tpcoord/tpcoord/broadcast"
)

// TestSchedulerBudgetValidated: a token budget below MaxBatch could not
// feed every decoding row; it is refused, naming both.
func TestSchedulerBudgetValidated(t *testing.T) {
	for _, tc := range []struct {
		budget int
		ok     bool
	}{{0, true}, {8, true}, {100, true}, {7, false}, {1, false}, {-1, false}} {
		_, err := NewScheduler(SchedulerConfig{MaxBatch: 8, MaxQueue: 1, MaxNumBatchedTokens: tc.budget})
		if ok := err == nil; ok != tc.ok {
			t.Errorf("budget %d with MaxBatch 8: err %v", tc.budget, err)
		}
		if err != nil && (!strings.Contains(err.Error(), "MaxNumBatchedTokens ("+strconv.Itoa(tc.budget)+")") || !strings.Contains(err.Error(), "MaxBatch (8)")) {
			t.Errorf("budget %d: %q does not name both values", tc.budget, err)
		}
	}
}

// checkChunked checks what the stepper's last step left: it fed at most
// budget tokens, at most one row is being prefilled, and every row's
// block table (the mirror's, from the grants) is the scheduler's and
// covers exactly the tokens the row has fed.
func checkChunked(t *testing.T, s *stepper, budget int) {
	t.Helper()
	if n := s.mirror.StepTokens(); n > budget || n < 0 {
		t.Fatalf("step %d fed %d tokens, budget %d", s.k-1, n, budget)
	}
	prefilling := 0
	for _, r := range s.mirror.Rows() {
		if r.Prefilling() {
			prefilling++
		}
		if b := s.sched.Blocks(); b != nil {
			if need := b.Config().Need(r.Fed); need != len(r.Blocks) || !slices.Equal(r.Blocks, b.Table(r.ID)) {
				t.Fatalf("step %d, sequence %d: fed %d tokens (%d blocks), table %v in the mirror, %v in the scheduler",
					s.k-1, r.ID, r.Fed, need, r.Blocks, b.Table(r.ID))
			}
		}
		if req := s.sched.Request(r.ID); req != nil && req.Fed != r.Fed {
			t.Fatalf("step %d, sequence %d: fed %d in the mirror, %d in the scheduler", s.k-1, r.ID, r.Fed, req.Fed)
		}
	}
	if prefilling > 1 {
		t.Fatalf("step %d: %d rows being prefilled, at most 1", s.k-1, prefilling)
	}
}

// TestSchedulerChunkedRandomNoLeak: 10,000 random requests, prompts up to
// several times the token budget, through a pool a fraction of their
// needs, with random cancels: no step feeds more than the budget, grants
// cover exactly what each row fed, the block invariant holds at every
// step, every request that was not cancelled has exactly its undisturbed
// tokens (however often it was chunked or preempted), and no block is
// held at the end.
func TestSchedulerChunkedRandomNoLeak(t *testing.T) {
	const budget = 16
	rng := rand.New(rand.NewPCG(35, 2))
	kv := KVConfig{BlockSize: 4, Blocks: 40, Watermark: 1}
	s := newStepper(t, SchedulerConfig{MaxBatch: 8, MaxQueue: 64, EOS: 7, KV: &kv, MaxNumBatchedTokens: budget})
	var all []*Request
	chunked := 0
	for step := 0; len(all) < 10000 || !s.sched.Idle(); step++ {
		if step > 1000000 {
			t.Fatal("the load did not finish")
		}
		for len(all) < 10000 && rng.IntN(2) == 0 {
			prompt := make([]int32, 1+rng.IntN(60))
			prompt[0] = int32(rng.IntN(1000))
			r := &Request{Prompt: prompt, MaxTokens: 1 + rng.IntN(40), Tag: strconv.Itoa(len(all))}
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
		if st := s.next(); st != nil {
			chunked += len(st.Chunks)
			checkChunked(t, s, budget)
			s.sampleModel()
		}
		check(t, s.sched.Blocks())
	}
	if s.sched.Preemptions() == 0 || chunked == 0 {
		t.Fatalf("%d preemptions, %d chunks: the pool and the budget were meant to be too small", s.sched.Preemptions(), chunked)
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
	t.Logf("%d requests, %d preemptions, %d chunks, %d steps", len(all), s.sched.Preemptions(), chunked, s.k)
}

// TestSchedulerLongPromptChunked: a prompt 20 times the budget is
// prefilled over many steps, taking what the decoding rows leave, while
// they go on with one token each step; it is sampled only once it is
// whole, and its tokens are those of an undisturbed run.
func TestSchedulerLongPromptChunked(t *testing.T) {
	const budget = 8
	s := newStepper(t, SchedulerConfig{MaxBatch: 4, MaxQueue: 4, EOS: -1, MaxNumBatchedTokens: budget})
	a := &Request{Prompt: []int32{1, 2}, MaxTokens: 60, Params: greedyIgnoreEOS()}
	b := &Request{Prompt: []int32{3}, MaxTokens: 60, Params: greedyIgnoreEOS()}
	long := &Request{Prompt: make([]int32, 20*budget), MaxTokens: 3, Params: greedyIgnoreEOS()}
	long.Prompt[0] = 9
	for _, r := range []*Request{a, b} {
		if err := s.sched.Submit(r); err != nil {
			t.Fatal(err)
		}
	}
	s.next()
	s.sampleModel()
	if err := s.sched.Submit(long); err != nil {
		t.Fatal(err)
	}
	steps, lastFed := 0, 0
	for long.Fed < len(long.Prompt) {
		outA, outB := len(a.Output), len(b.Output)
		st := s.next()
		checkChunked(t, s, budget)
		row := s.mirror.Lookup(long.Seq)
		if got, want := row.Fed-lastFed, min(budget-2, len(long.Prompt)-lastFed); got != want {
			t.Fatalf("step %d: the long prompt fed %d tokens (%d of %d), want the %d the two decoding rows leave", st.Step, got, row.Fed, len(long.Prompt), want)
		}
		lastFed = row.Fed
		sampled := 0 // the long prompt is sampled once it is whole
		if !row.Prefilling() {
			sampled = 1
		}
		if ev := s.sampleModel(); len(ev) != 2+sampled || len(a.Output) != outA+1 || len(b.Output) != outB+1 || len(long.Output) != sampled {
			t.Fatalf("step %d: %d events; a has %d tokens (was %d), b %d (was %d), the long prompt %d: want one more each, and %d for it",
				st.Step, len(ev), len(a.Output), outA, len(b.Output), outB, len(long.Output), sampled)
		}
		steps++
	}
	if want := (len(long.Prompt) + budget - 3) / (budget - 2); steps != want {
		t.Errorf("prefilled in %d steps, want %d", steps, want)
	}
	for !s.sched.Idle() {
		s.next()
		checkChunked(t, s, budget)
		s.sampleModel()
	}
	for _, r := range []*Request{a, b, long} {
		if want := undisturbed(r, -1); !slices.Equal(r.Output, want) {
			t.Errorf("seq %d: %v, undisturbed %v", r.Seq, r.Output, want)
		}
	}
}

// TestSchedulerPreemptsPrefilling: a row being prefilled is the most
// recently admitted, so it is the one preempted when a decoding row needs
// a block; it is re-admitted later with its prefill started over from
// the first token, and ends with its undisturbed tokens.
func TestSchedulerPreemptsPrefilling(t *testing.T) {
	const budget = 8
	kv := KVConfig{BlockSize: 4, Blocks: 7}
	s := newStepper(t, SchedulerConfig{MaxBatch: 2, MaxQueue: 2, EOS: -1, KV: &kv, MaxNumBatchedTokens: budget})
	a := &Request{Prompt: []int32{1, 1, 1, 1}, MaxTokens: 20, Params: greedyIgnoreEOS()}
	b := &Request{Prompt: make([]int32, 24), MaxTokens: 1, Params: greedyIgnoreEOS()}
	b.Prompt[0] = 5
	for _, r := range []*Request{a, b} {
		if err := s.sched.Submit(r); err != nil {
			t.Fatal(err)
		}
	}
	preempted, readmitted := 0, 0
	for !s.sched.Idle() {
		var wasPrefilling bool
		if row := s.mirror.Lookup(b.Seq); row != nil {
			wasPrefilling = row.Prefilling()
		}
		st := s.next()
		checkChunked(t, s, budget)
		check(t, s.sched.Blocks())
		if slices.Contains(st.Removed, b.Seq) && b.Finish == "" {
			if !wasPrefilling || b.Fed != 0 || len(st.Admitted) != 0 {
				t.Fatalf("step %d preempted b: it was prefilling %v, fed %d, admitted %v", st.Step, wasPrefilling, b.Fed, st.Admitted)
			}
			preempted++
		}
		if preempted > 0 && slices.Equal(admittedSeqs(st), []uint64{b.Seq}) {
			readmitted++
			if row := s.mirror.Lookup(b.Seq); row.Fed > budget {
				t.Fatalf("step %d re-admitted b feeding %d tokens: want its prefill started over", st.Step, row.Fed)
			}
		}
		s.sampleModel()
	}
	if preempted == 0 || readmitted == 0 {
		t.Fatalf("b preempted %d times, re-admitted %d: the pool was meant to run out while it was prefilled", preempted, readmitted)
	}
	for _, r := range []*Request{a, b} {
		if want := undisturbed(r, -1); r.Finish != "length" || !slices.Equal(r.Output, want) {
			t.Errorf("seq %d: %s %v, undisturbed %v", r.Seq, r.Finish, r.Output, want)
		}
	}
	if s.sched.Blocks().Used() != 0 {
		t.Fatalf("%d blocks held at the end", s.sched.Blocks().Used())
	}
}

// TestSchedulerPrefillingNotSampled: whatever the picker returns for a
// row being prefilled, the next step carries NoToken for it, its
// requester hears nothing, and it neither fails nor leaves.
func TestSchedulerPrefillingNotSampled(t *testing.T) {
	s := newStepper(t, SchedulerConfig{MaxBatch: 2, MaxQueue: 2, EOS: -1, MaxNumBatchedTokens: 4})
	r := &Request{Prompt: []int32{1, 2, 3, 4, 5, 6}, MaxTokens: 2}
	if err := s.sched.Submit(r); err != nil {
		t.Fatal(err)
	}
	st := s.next()
	if want := []broadcast.Chunk{{Seq: r.Seq, Fed: 4}}; !slices.Equal(st.Chunks, want) {
		t.Fatalf("chunks %v, want %v", st.Chunks, want)
	}
	if ev := s.sample(9, nil, map[uint64]error{r.Seq: errors.New("NaN")}); len(ev) != 0 || r.Finish != "" || r.Err != nil {
		t.Fatalf("events %v, finish %q, err %v for a row being prefilled", ev, r.Finish, r.Err)
	}
	st = s.next()
	if want := []broadcast.Token{{Seq: r.Seq, Token: NoToken}}; !slices.Equal(st.Tokens, want) || len(st.Removed) != 0 || len(st.Chunks) != 0 {
		t.Fatalf("step %d: tokens %v, removed %v, chunks %v; want NoToken, no removal, the prefill done", st.Step, st.Tokens, st.Removed, st.Chunks)
	}
	if ev := s.sample(9, nil, nil); len(ev) != 1 || ev[0].Token != 9 || ev[0].Index != 0 {
		t.Fatalf("events %v once the prompt is whole, want its first token", ev)
	}
}
