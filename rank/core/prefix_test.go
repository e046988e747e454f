package core

import (
	"errors"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/tpcoord/tpcoord/broadcast"
)

// kvSim is the workers' paged KV cache as the steps drive it: each slot
// holds the token written there (-1: never written). It writes what each
// step feeds, refusing a write to a block that another table holds, and
// reads every row's fed tokens back through its table, so a block shared
// wrongly, freed or evicted while held, or read before it was written
// shows as a wrong token.
type kvSim struct {
	t     *testing.T
	bs    int
	slots []int32
	fed   map[uint64]int // every row's Fed after the last step
}

func newKVSim(t *testing.T, kv KVConfig) *kvSim {
	k := &kvSim{t: t, bs: kv.BlockSize, slots: make([]int32, kv.Blocks*kv.BlockSize), fed: map[uint64]int{}}
	for i := range k.slots {
		k.slots[i] = -1
	}
	return k
}

// seqToken is a mirrored sequence's token i.
func seqToken(r *Seq, i int) int32 {
	if i < len(r.Prompt) {
		return r.Prompt[i]
	}
	return r.Output[i-len(r.Prompt)]
}

// apply runs st's forward pass on the cache: m has just applied st.
func (k *kvSim) apply(m *Mirror, st *broadcast.Step) {
	k.t.Helper()
	holders := map[BlockID]int{}
	for _, r := range m.Rows() {
		for _, b := range r.Blocks {
			holders[b]++
		}
	}
	fed := make(map[uint64]int, len(m.Rows()))
	for _, r := range m.Rows() {
		from := k.fed[r.ID]
		if slices.ContainsFunc(st.Admitted, func(a broadcast.Admission) bool { return a.Seq == r.ID }) {
			from = r.Cached
		}
		for i := from; i < r.Fed; i++ {
			b := r.Blocks[i/k.bs]
			if holders[b] > 1 {
				k.t.Fatalf("step %d: sequence %d writes its token %d in block %d, which %d tables hold", st.Step, r.ID, i, b, holders[b])
			}
			k.slots[int(b)*k.bs+i%k.bs] = seqToken(r, i)
		}
		fed[r.ID] = r.Fed
	}
	k.fed = fed
	for _, r := range m.Rows() {
		for i := range r.Fed {
			if got := k.slots[int(r.Blocks[i/k.bs])*k.bs+i%k.bs]; got != seqToken(r, i) {
				k.t.Fatalf("step %d: sequence %d reads %d at its token %d (block %d, cached prefix %d), it is %d",
					st.Step, r.ID, got, i, r.Blocks[i/k.bs], r.Cached, seqToken(r, i))
			}
		}
	}
}

// contentToken is a model whose next token depends on every token of the
// sequence: a row whose history read back wrong would go on differently.
func contentToken(r *Seq) int32 {
	h := fnv.New64a()
	for i := range r.Len() {
		v := seqToken(r, i)
		h.Write([]byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)})
	}
	return int32(h.Sum64()>>33) % 50
}

// prefixStepper drives a scheduler with prefix caching, its mirror and
// the simulated cache, checking the invariants at every step.
type prefixStepper struct {
	*stepper
	sim    *kvSim
	budget int
	fed    int // Σ StepTokens
}

func newPrefixStepper(t *testing.T, cfg SchedulerConfig) *prefixStepper {
	return &prefixStepper{stepper: newStepper(t, cfg), sim: newKVSim(t, *cfg.KV), budget: cfg.MaxNumBatchedTokens}
}

// step runs one step: the scheduler's decision, the mirror, the cache's
// forward pass, the checks, then sampling with the content model.
func (p *prefixStepper) step() *broadcast.Step {
	p.t.Helper()
	st := p.next()
	if st == nil {
		return nil
	}
	p.sim.apply(p.mirror, st)
	budget := p.budget
	if budget == 0 {
		budget = math.MaxInt
	}
	checkChunked(p.t, p.stepper, budget)
	check(p.t, p.sched.Blocks())
	p.fed += p.mirror.StepTokens()
	rows := p.mirror.Rows()
	tokens := make([]int32, len(rows))
	for i, r := range rows {
		tokens[i] = contentToken(r)
	}
	p.sched.Sampled(rows, tokens, nil)
	return st
}

// contentUndisturbed is r's output under the content model, run alone.
func contentUndisturbed(r *Request, eos int32) []int32 {
	seq := &Seq{Prompt: r.Prompt}
	for len(seq.Output) < r.MaxTokens {
		tok := contentToken(seq)
		seq.Output = append(seq.Output, tok)
		if tok == eos && !r.Params.IgnoreEOS && len(seq.Output) >= r.Params.MinTokens {
			break
		}
	}
	return seq.Output
}

func seqTokens(n int, base int32) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = base + int32(i)
	}
	return out
}

// TestPrefixPartialBlock: a request whose prompt extends a cached prefix
// partway into a block shares only the full blocks; the partial one, and
// the rest, are computed. Its grant lists the shared blocks first.
func TestPrefixPartialBlock(t *testing.T) {
	kv := KVConfig{BlockSize: 4, Blocks: 16}
	p := newPrefixStepper(t, SchedulerConfig{MaxBatch: 4, MaxQueue: 4, EOS: -1, KV: &kv, PrefixCaching: true})
	a := &Request{Prompt: seqTokens(10, 1), MaxTokens: 1, Params: greedyIgnoreEOS()}
	if err := p.sched.Submit(a); err != nil {
		t.Fatal(err)
	}
	p.step()
	aTable := slices.Clone(p.mirror.Lookup(a.Seq).Blocks)
	for !p.sched.Idle() {
		p.step()
	}
	b := &Request{Prompt: append(slices.Clone(a.Prompt), 20, 21, 22, 23, 24), MaxTokens: 2, Params: greedyIgnoreEOS()}
	if err := p.sched.Submit(b); err != nil {
		t.Fatal(err)
	}
	st := p.step()
	row := p.mirror.Lookup(b.Seq)
	if !slices.Equal(st.Hits, []broadcast.Hit{{Seq: b.Seq, Tokens: 8}}) || row.Cached != 8 {
		t.Fatalf("hits %v, cached %d: want the two full blocks of a's prompt (8 tokens)", st.Hits, row.Cached)
	}
	if !slices.Equal(row.Blocks[:2], aTable[:2]) || len(row.Blocks) != 4 || len(st.Grants) != 1 || len(st.Grants[0].Blocks) != 4 {
		t.Fatalf("b's table %v (a's was %v), grants %v: want a's first two blocks, then two new", row.Blocks, aTable, st.Grants)
	}
	if n := p.mirror.StepTokens(); n != 7 {
		t.Fatalf("the step fed %d tokens, want 7 (b's tokens 8 to 14)", n)
	}
	for !p.sched.Idle() {
		p.step()
	}
	if want := contentUndisturbed(b, -1); !slices.Equal(b.Output, want) {
		t.Fatalf("b: %v, undisturbed %v", b.Output, want)
	}
	if q, h := p.sched.PrefixCache(); q != 10+15 || h != 8 {
		t.Fatalf("queries %d, hits %d; want 25 and 8 tokens", q, h)
	}
}

// TestPrefixWholePromptHit: a prompt whose blocks are all cached still
// computes its last block (at least one token, for its logits); a prompt
// of one block, all cached, shares nothing.
func TestPrefixWholePromptHit(t *testing.T) {
	kv := KVConfig{BlockSize: 4, Blocks: 16}
	p := newPrefixStepper(t, SchedulerConfig{MaxBatch: 4, MaxQueue: 4, EOS: -1, KV: &kv, PrefixCaching: true})
	a := &Request{Prompt: seqTokens(8, 1), MaxTokens: 3, Params: greedyIgnoreEOS()}
	if err := p.sched.Submit(a); err != nil {
		t.Fatal(err)
	}
	for !p.sched.Idle() {
		p.step()
	}
	for _, tc := range []struct {
		prompt []int32
		cached int
	}{{a.Prompt, 4}, {a.Prompt[:4], 0}, {append(slices.Clone(a.Prompt), a.Output...), 8}} {
		r := &Request{Prompt: tc.prompt, MaxTokens: 2, Params: greedyIgnoreEOS()}
		if err := p.sched.Submit(r); err != nil {
			t.Fatal(err)
		}
		st := p.step()
		row := p.mirror.Lookup(r.Seq)
		if row.Cached != tc.cached || p.mirror.StepTokens() != len(tc.prompt)-tc.cached || (tc.cached == 0) != (len(st.Hits) == 0) {
			t.Fatalf("prompt of %d tokens: cached %d, fed %d, hits %v; want %d cached", len(tc.prompt), row.Cached, p.mirror.StepTokens(), st.Hits, tc.cached)
		}
		for !p.sched.Idle() {
			p.step()
		}
		if want := contentUndisturbed(r, -1); !slices.Equal(r.Output, want) {
			t.Fatalf("%v, undisturbed %v", r.Output, want)
		}
	}
}

// TestPrefixPendingIdentical: n identical prompts submitted together:
// the first computes the prompt; the others, whose blocks it is filling,
// wait one step (in order) and then share them.
func TestPrefixPendingIdentical(t *testing.T) {
	const n = 4
	kv := KVConfig{BlockSize: 4, Blocks: 32}
	p := newPrefixStepper(t, SchedulerConfig{MaxBatch: 8, MaxQueue: 8, EOS: -1, KV: &kv, PrefixCaching: true})
	var reqs []*Request
	for range n {
		r := &Request{Prompt: seqTokens(16, 5), MaxTokens: 4, Params: greedyIgnoreEOS()}
		if err := p.sched.Submit(r); err != nil {
			t.Fatal(err)
		}
		reqs = append(reqs, r)
	}
	if st := p.step(); !slices.Equal(admittedSeqs(st), []uint64{reqs[0].Seq}) || len(st.Hits) != 0 {
		t.Fatalf("step 1 admitted %v, hits %v: want the first alone, computing", admittedSeqs(st), st.Hits)
	}
	st := p.step()
	if want := []uint64{reqs[1].Seq, reqs[2].Seq, reqs[3].Seq}; !slices.Equal(admittedSeqs(st), want) || len(st.Hits) != n-1 {
		t.Fatalf("step 2 admitted %v, hits %v: want the other three, in order, each hitting", admittedSeqs(st), st.Hits)
	}
	first := p.mirror.Lookup(reqs[0].Seq).Blocks
	for _, r := range reqs[1:] {
		if row := p.mirror.Lookup(r.Seq); row.Cached != 12 || !slices.Equal(row.Blocks[:3], first[:3]) {
			t.Fatalf("sequence %d: cached %d, table %v; want the first's blocks %v", r.Seq, row.Cached, row.Blocks, first[:3])
		}
	}
	if got := p.mirror.StepTokens(); got != 1+3*4 {
		t.Fatalf("step 2 fed %d tokens, want 13: the first's decode, the others' last block", got)
	}
	for !p.sched.Idle() {
		p.step()
	}
	if q, h := p.sched.PrefixCache(); q != n*16 || h != (n-1)*12 {
		t.Fatalf("queries %d, hits %d; want %d and %d tokens", q, h, n*16, (n-1)*12)
	}
	for _, r := range reqs {
		if want := contentUndisturbed(r, -1); !slices.Equal(r.Output, want) {
			t.Fatalf("sequence %d: %v, undisturbed %v", r.Seq, r.Output, want)
		}
	}
}

// TestPrefixPreemptedFindsOwnBlocks: a request preempted for want of
// blocks is admitted again with its prompt and output, and finds its own
// blocks in the cache: it recomputes only what was evicted, and its
// tokens are those of a run without caching.
func TestPrefixPreemptedFindsOwnBlocks(t *testing.T) {
	kv := KVConfig{BlockSize: 4, Blocks: 8}
	p := newPrefixStepper(t, SchedulerConfig{MaxBatch: 4, MaxQueue: 4, EOS: -1, KV: &kv, PrefixCaching: true})
	a := &Request{Prompt: seqTokens(3, 1), MaxTokens: 20, Params: greedyIgnoreEOS()}
	b := &Request{Prompt: seqTokens(13, 40), MaxTokens: 10, Params: greedyIgnoreEOS()}
	for _, r := range []*Request{a, b} {
		if err := p.sched.Submit(r); err != nil {
			t.Fatal(err)
		}
	}
	preempted, rehit := false, 0
	for !p.sched.Idle() {
		st := p.step()
		if slices.Contains(st.Removed, b.Seq) && b.Finish == "" {
			preempted = true
		}
		for _, h := range st.Hits {
			if preempted && h.Seq == b.Seq {
				rehit = int(h.Tokens)
			}
		}
	}
	if !preempted || rehit == 0 {
		t.Fatalf("b preempted %v, re-admitted with %d tokens cached: want its own blocks found", preempted, rehit)
	}
	for _, r := range []*Request{a, b} {
		if want := contentUndisturbed(r, -1); !slices.Equal(r.Output, want) {
			t.Errorf("sequence %d: %v, undisturbed %v", r.Seq, r.Output, want)
		}
	}
	t.Logf("b re-admitted with %d of its tokens cached", rehit)
}

// prefixLoad is the workload of TestPrefixRandomNoLeak: n requests, each
// one of a few system prompts (or none) and a random suffix of a few
// tokens from a small vocabulary, so that prompts share prefixes of
// every length, whole prompts recur, and blocks of a prompt and its
// output are found again.
func prefixLoad(n int, rng *rand.Rand) []*Request {
	var systems [][]int32
	for _, l := range []int{6, 13, 20, 33} {
		p := make([]int32, l)
		for i := range p {
			p[i] = int32(rng.IntN(50))
		}
		systems = append(systems, p)
	}
	reqs := make([]*Request, n)
	for i := range reqs {
		var prompt []int32
		if k := rng.IntN(len(systems) + 1); k < len(systems) {
			prompt = slices.Clone(systems[k])
		}
		for range rng.IntN(13) {
			prompt = append(prompt, int32(rng.IntN(3)))
		}
		if len(prompt) == 0 {
			prompt = append(prompt, int32(rng.IntN(50)))
		}
		reqs[i] = &Request{Prompt: prompt, MaxTokens: 1 + rng.IntN(30), Tag: strconv.Itoa(i)}
		reqs[i].Params.IgnoreEOS = rng.IntN(3) == 0
	}
	return reqs
}

// runPrefixLoad runs the workload through a small pool and budget, with
// prefix caching on or off, checking every step, and returns the stepper
// at the end.
func runPrefixLoad(t *testing.T, reqs []*Request, caching bool) *prefixStepper {
	kv := KVConfig{BlockSize: 4, Blocks: 48, Watermark: 1}
	p := newPrefixStepper(t, SchedulerConfig{MaxBatch: 8, MaxQueue: 64, EOS: 7, KV: &kv, MaxNumBatchedTokens: 16, PrefixCaching: caching})
	arrivals := rand.New(rand.NewPCG(36, 2))
	next := 0
	for step := 0; next < len(reqs) || !p.sched.Idle(); step++ {
		if step > 1000000 {
			t.Fatal("the load did not finish")
		}
		for next < len(reqs) && arrivals.IntN(2) == 0 {
			if err := p.sched.Submit(reqs[next]); errors.Is(err, ErrOverloaded) {
				break
			} else if err != nil {
				t.Fatal(err)
			}
			next++
		}
		p.step()
	}
	b := p.sched.Blocks()
	check(t, b)
	if b.Used() != 0 || b.Free() != kv.Blocks {
		t.Fatalf("caching %v: %d blocks held, %d free of %d after every request ended", caching, b.Used(), b.Free(), kv.Blocks)
	}
	return p
}

// TestPrefixRandomNoLeak: 10,000 random requests sharing prefixes through
// a small pool and token budget: at every step the block invariants hold
// (counts, queue, cache), no row writes a block another holds and every
// row reads its own tokens back through its table; at the end no block
// is held; every request's output equals its output with prefix caching
// off (and the content model's, run alone), which fed more tokens.
func TestPrefixRandomNoLeak(t *testing.T) {
	const n = 10000
	clone := func(reqs []*Request) []*Request {
		out := make([]*Request, len(reqs))
		for i, r := range reqs {
			out[i] = &Request{Prompt: r.Prompt, MaxTokens: r.MaxTokens, Params: r.Params, Tag: r.Tag}
		}
		return out
	}
	load := prefixLoad(n, rand.New(rand.NewPCG(36, 1)))
	on, off := clone(load), clone(load)
	pOn := runPrefixLoad(t, on, true)
	pOff := runPrefixLoad(t, off, false)
	for i := range load {
		if !slices.Equal(on[i].Output, off[i].Output) || on[i].Finish != off[i].Finish {
			t.Fatalf("request %d: %s %v with prefix caching, %s %v without", i, on[i].Finish, on[i].Output, off[i].Finish, off[i].Output)
		}
		if want := contentUndisturbed(on[i], 7); !slices.Equal(on[i].Output, want) {
			t.Fatalf("request %d: %v, undisturbed %v", i, on[i].Output, want)
		}
	}
	q, h := pOn.sched.PrefixCache()
	if h == 0 || pOn.fed >= pOff.fed || pOn.sched.Preemptions() == 0 {
		t.Fatalf("%d of %d tokens hit, %d tokens fed with caching, %d without, %d preemptions: want hits, fewer fed, and preemptions",
			h, q, pOn.fed, pOff.fed, pOn.sched.Preemptions())
	}
	if qo, ho := pOff.sched.PrefixCache(); qo != 0 || ho != 0 {
		t.Fatalf("caching off counted %d queries, %d hits", qo, ho)
	}
	t.Logf("%d of %d tokens hit; fed %d tokens with caching, %d without; %d and %d preemptions; %d and %d steps",
		h, q, pOn.fed, pOff.fed, pOn.sched.Preemptions(), pOff.sched.Preemptions(), pOn.k, pOff.k)
}
