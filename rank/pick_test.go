package rank

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"weak"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/internal/poll"
	"github.com/tpcoord/tpcoord/noisepool"
	"github.com/tpcoord/tpcoord/rank/client"
)

// pickAll runs one Pick over rows with default parameters except for the
// given temperatures, on the synthetic executor's logits.
func pickAll(t *testing.T, p Picker, temps []float32) []int32 {
	t.Helper()
	const vocab = 512
	ex, err := NewSynthetic(SyntheticConfig{Vocab: vocab, EOS: -1, Logits: true})
	if err != nil {
		t.Fatal(err)
	}
	var rows []*Seq
	var reqs []*Request
	for i, temp := range temps {
		seed := uint64(i)
		params := api.DefaultParams()
		params.Temperature, params.Seed = temp, &seed
		rows = append(rows, &Seq{ID: uint64(i + 1), Prompt: []int32{int32(i), 7}, Output: []int32{3}, Fed: 3})
		reqs = append(reqs, &Request{Params: params})
	}
	logits, err := ex.Forward(t.Context(), Batch{Rows: rows})
	if err != nil {
		t.Fatal(err)
	}
	tokens, errs := make([]int32, len(rows)), make([]error, len(rows))
	p.Pick(rows, reqs, logits, vocab, tokens, errs)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("row %d: %v", i, err)
		}
	}
	return tokens
}

// NoiseSync and NoisePool (exact or bound rows) only move where the noise
// is made: same tokens as inline.
func TestSamplingNoiseSyncSameTokens(t *testing.T) {
	temps := []float32{0.8, 1, 0, 1.3, 0.5}
	inline := pickAll(t, NewSamplingWith(SamplingConfig{Vocab: 512, EOS: -1, Base: 9, Noise: NoiseInline}), temps)
	sync := pickAll(t, NewSamplingWith(SamplingConfig{Vocab: 512, EOS: -1, Base: 9, Noise: NoiseSync}), temps)
	if !slices.Equal(inline, sync) {
		t.Fatalf("inline %v, sync %v", inline, sync)
	}
	for _, form := range []noisepool.Form{noisepool.FormExact, noisepool.FormBound} {
		pool, err := noisepool.New(noisepool.Config{Vocab: 512, Rows: 16, Producers: 1, Lookahead: 1, MaxBytes: 1 << 20, Form: form})
		if err != nil {
			t.Fatal(err)
		}
		pooled := pickAll(t, NewSamplingWith(SamplingConfig{Vocab: 512, EOS: -1, Base: 9, Noise: NoisePool, Pool: pool}), temps)
		pool.Close()
		if !slices.Equal(inline, pooled) {
			t.Fatalf("inline %v, %v pool %v", inline, form, pooled)
		}
	}
	for _, noise := range []NoiseMode{NoiseInline, NoiseSync} {
		soft := pickAll(t, NewSamplingWith(SamplingConfig{Vocab: 512, EOS: -1, Base: 9, Noise: noise, Softmax: true}), temps)
		for i, tok := range soft {
			if tok < 0 || tok >= 512 {
				t.Fatalf("softmax row %d: token %d", i, tok)
			}
		}
		if soft[2] != inline[2] { // greedy row: no noise involved
			t.Fatalf("greedy row: softmax %d, log-space %d", soft[2], inline[2])
		}
	}
}

func TestNewSamplingWithPoolRequired(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("NoisePool without a pool did not panic")
		}
	}()
	NewSamplingWith(SamplingConfig{Vocab: 512, Noise: NoisePool})
}

// countingPicker counts the rows it was asked to pick and checks their logits.
type countingPicker struct {
	rows atomic.Int64
	bad  atomic.Int64
}

func (p *countingPicker) Pick(rows []*Seq, reqs []*Request, logits []float32, vocab int, tokens []int32, errs []error) {
	p.rows.Add(int64(len(rows)))
	if len(logits) != len(rows)*vocab || len(reqs) != len(rows) || len(tokens) != len(rows) || len(errs) != len(rows) {
		p.bad.Add(1)
	}
	Greedy{}.Pick(rows, reqs, logits, vocab, tokens, errs)
}

// TestDriverFollowerPick: with FollowerPick, a follower samples its own
// logits after every forward pass, and the cluster's output is unchanged.
func TestDriverFollowerPick(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hub := broadcast.NewHub()
	requester := hub.Connect()
	t.Cleanup(requester.Close)
	fp := &countingPicker{}
	r0 := startRank(t, ctx, hub, driverConfig(0, 2))
	cfg1 := driverConfig(1, 2)
	cfg1.FollowerPick = fp
	r1 := startRank(t, ctx, hub, cfg1)
	req := &api.GenerateRequest{PromptTokenIDs: []int32{5, 6, 7}, MaxTokens: 6}
	want, _ := predict(t, req)
	var rep *api.GenerateReply
	poll.Until(t, 10*time.Second, "generate did not succeed", func() bool {
		gctx, gcancel := context.WithTimeout(ctx, 5*time.Second)
		defer gcancel()
		var err error
		rep, err = client.Generate(gctx, requester, drvSubj, req, nil)
		return err == nil
	})
	if !slices.Equal(rep.Tokens, want) {
		t.Fatalf("tokens %v, want %v", rep.Tokens, want)
	}
	poll.Until(t, 10*time.Second, "follower did not pick", func() bool { return fp.rows.Load() >= int64(len(want)) })
	if fp.bad.Load() != 0 {
		t.Fatal("FollowerPick got inconsistent slices")
	}
	cancel()
	for _, r := range []*runningRank{r0, r1} {
		if err := r.wait(t); err != nil {
			t.Errorf("rank %d: %v", r.d.cfg.Rank, err)
		}
	}
}

// TestSamplingKeepsNoBatch: a Sampling outlives epochs (the agent gives
// every epoch's driver the same one) while each epoch has its own executor,
// whose buffer the logits are. Once Pick returns, nothing of the batch it
// sampled (logits, requests) is reachable through the Sampling, in every
// noise mode.
func TestSamplingKeepsNoBatch(t *testing.T) {
	const vocab = 512
	pool, err := noisepool.New(noisepool.Config{Vocab: vocab, Rows: 8, Producers: 1, Lookahead: 2, MaxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for name, mode := range map[string]NoiseMode{"inline": NoiseInline, "pool": NoisePool, "sync": NoiseSync} {
		p := NewSamplingWith(SamplingConfig{Vocab: vocab, EOS: -1, Base: 7, Noise: mode, Pool: pool})
		logits, req := pickOnce(t, p, vocab)
		runtime.GC()
		if logits.Value() != nil || req.Value() != nil {
			t.Errorf("%s: after Pick, the Sampling keeps the batch reachable (logits %v, request %v)",
				name, logits.Value() != nil, req.Value() != nil)
		}
		runtime.KeepAlive(p)
	}
}

// pickOnce picks two rows on logits and requests of its own, and returns
// weak pointers to them.
func pickOnce(t *testing.T, p *Sampling, vocab int) (weak.Pointer[float32], weak.Pointer[Request]) {
	t.Helper()
	logits := make([]float32, 2*vocab)
	for i := range logits {
		logits[i] = float32(i%vocab) / float32(vocab)
	}
	seed := uint64(3)
	req := &Request{Params: api.DefaultParams()}
	req.Params.Seed = &seed
	rows := []*Seq{{ID: 1, Prompt: []int32{5}, Fed: 1}, {ID: 2, Prompt: []int32{6}, Output: []int32{7}, Fed: 2}}
	tokens, errs := make([]int32, 2), make([]error, 2)
	p.Pick(rows, []*Request{req, nil}, logits, vocab, tokens, errs)
	for i, err := range errs {
		if err != nil || tokens[i] < 0 {
			t.Fatalf("row %d: token %d, %v", i, tokens[i], err)
		}
	}
	return weak.Make(&logits[0]), weak.Make(req)
}

// TestPrefetchMakesFirstRows: rows told to Prefetch before the forward pass
// get their first noise row from the producers (without it, Pick activates
// a new request's stream just before it takes the row, which then is
// usually made inline). The tokens are the same either way.
func TestPrefetchMakesFirstRows(t *testing.T) {
	const vocab = 512
	temps := []float32{0.8, 1, 0, 1.3} // the greedy row reads no noise row
	inline := pickAll(t, NewSamplingWith(SamplingConfig{Vocab: vocab, EOS: -1, Base: 9, Noise: NoiseInline}), temps)
	for _, prefetch := range []bool{false, true} {
		pool, err := noisepool.New(noisepool.Config{Vocab: vocab, Rows: 16, Producers: 1, Lookahead: 1, MaxBytes: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		p := NewSamplingWith(SamplingConfig{Vocab: vocab, EOS: -1, Base: 9, Noise: NoisePool, Pool: pool})
		var pp Picker = p
		if prefetch {
			pp = prefetchFirst{p, pool, t}
		}
		got := pickAll(t, pp, temps)
		s := pool.Stats()
		pool.Close()
		if !slices.Equal(got, inline) {
			t.Fatalf("prefetch %v: tokens %v, inline noise gives %v", prefetch, got, inline)
		}
		// Without Prefetch, how many rows a producer makes between Pick's
		// Activate and its Take is a race; with it, none is left to Pick.
		if prefetch && (s.Taken != 3 || s.Inline != 0) {
			t.Errorf("%d rows taken, %d inline; want 3 taken, none inline", s.Taken, s.Inline)
		}
	}
}

// prefetchSampling is a Sampling over vocabulary 64 with a pool of 16
// rows, one producer and a lookahead of 2, closed when the test ends.
func prefetchSampling(t *testing.T) (*Sampling, *noisepool.Pool) {
	t.Helper()
	pool, err := noisepool.New(noisepool.Config{Vocab: 64, Rows: 16, Producers: 1, Lookahead: 2, MaxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close() })
	return NewSampling(64, -1, 9, pool), pool
}

// TestPrefetchRetiresAndStopsAtLimit: Prefetch prefetches no noise row past
// a request's token limit, and retires the streams of rows that are not in
// the coming step (requests that finished), so that the producers spend
// the forward pass on the step's rows.
func TestPrefetchRetiresAndStopsAtLimit(t *testing.T) {
	p, pool := prefetchSampling(t)
	warm := func() noisepool.Stats {
		t.Helper()
		if err := pool.Warm(t.Context()); err != nil {
			t.Fatal(err)
		}
		return pool.Stats()
	}
	// The last token of a 3-token request, and the first of a longer one.
	last, long := &Seq{ID: 1, Output: []int32{5, 6}, Fed: 2}, &Seq{ID: 2}
	p.Prefetch([]*Seq{last, long}, []*Request{{MaxTokens: 3, Params: api.DefaultParams()}, {MaxTokens: 100, Params: api.DefaultParams()}})
	if s := warm(); s.Streams != 2 || s.Ready != 3 {
		t.Fatalf("want 2 streams and 3 rows ready (1 before the limit, 2 of lookahead): %+v", s)
	}
	// Next step: the finished request is gone, a row without a request
	// (default parameters, no limit) joins.
	p.Prefetch([]*Seq{long, {ID: 3}}, []*Request{{MaxTokens: 100, Params: api.DefaultParams()}, nil})
	s := pool.Stats()
	if s.Streams != 2 || s.Discarded != 1 {
		t.Fatalf("want the finished stream retired (its row discarded) before the forward pass: %+v", s)
	}
	if s := warm(); s.Ready != 4 {
		t.Fatalf("want 2 rows ready for each of 2 streams: %+v", s)
	}
}

// TestPrefetchSharedSeedExtendsEnd: two requests with one seed share a
// noise stream; the longer one's limit holds for both, and retiring them
// leaves no stream (no reference leaks from extending the end).
func TestPrefetchSharedSeedExtendsEnd(t *testing.T) {
	p, pool := prefetchSampling(t)
	seed := uint64(42)
	params := api.DefaultParams()
	params.Seed = &seed
	rows := []*Seq{{ID: 1, Output: []int32{5}, Fed: 1}, {ID: 2, Output: []int32{5}, Fed: 1}}
	p.Prefetch(rows, []*Request{{MaxTokens: 2, Params: params}, {MaxTokens: 10, Params: params}})
	if err := pool.Warm(t.Context()); err != nil {
		t.Fatal(err)
	}
	if s := pool.Stats(); s.Streams != 1 || s.Ready != 2 {
		t.Fatalf("want one shared stream with rows 1 and 2 ready (the longer limit): %+v", s)
	}
	p.Prefetch([]*Seq{{ID: 3}}, []*Request{nil})
	if s := pool.Stats(); s.Streams != 1 {
		t.Fatalf("want the shared stream retired and the new one active: %+v", s)
	}
}

// prefetchFirst is the driver's order: Prefetch, the forward pass (here:
// until the producers are done), Pick.
type prefetchFirst struct {
	*Sampling
	pool *noisepool.Pool
	t    *testing.T
}

func (p prefetchFirst) Pick(rows []*Seq, reqs []*Request, logits []float32, vocab int, tokens []int32, errs []error) {
	p.Prefetch(rows, reqs)
	if err := p.pool.Warm(context.Background()); err != nil {
		p.t.Fatal(err)
	}
	p.Sampling.Pick(rows, reqs, logits, vocab, tokens, errs)
}

// orderLog records the calls of a step in order.
type orderLog struct {
	mu    sync.Mutex
	calls []string
}

func (l *orderLog) add(call string, rows []*Seq) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ids := make([]uint64, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	l.calls = append(l.calls, fmt.Sprintf("%s %v", call, ids))
}

type loggedExecutor struct {
	Executor
	log *orderLog
}

func (e loggedExecutor) Forward(ctx context.Context, b Batch) ([]float32, error) {
	e.log.add("forward", b.Rows)
	return e.Executor.Forward(ctx, b)
}

type loggedPicker struct {
	Greedy
	log *orderLog
}

func (p loggedPicker) Prefetch(rows []*Seq, reqs []*Request) { p.log.add("prefetch", rows) }

func (p loggedPicker) Pick(rows []*Seq, reqs []*Request, logits []float32, vocab int, tokens []int32, errs []error) {
	p.log.add("pick", rows)
	p.Greedy.Pick(rows, reqs, logits, vocab, tokens, errs)
}

// TestDriverPrefetchesBeforeForward: rank 0 tells a Prefetcher each step's
// rows before the forward pass, then picks the same rows.
func TestDriverPrefetchesBeforeForward(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hub := broadcast.NewHub()
	requester := hub.Connect()
	t.Cleanup(requester.Close)
	ex, err := NewSynthetic(SyntheticConfig{Vocab: drvVocab, EOS: drvEOS, Logits: true})
	if err != nil {
		t.Fatal(err)
	}
	log := &orderLog{}
	runRankWith(t, ctx, hub.Connect(), driverConfig(0, 1), loggedExecutor{ex, log}, loggedPicker{log: log})
	req := &api.GenerateRequest{PromptTokenIDs: []int32{5, 6, 7}, MaxTokens: 3}
	req.IgnoreEOS = true
	poll.Until(t, 10*time.Second, "generate did not succeed", func() bool {
		gctx, gcancel := context.WithTimeout(ctx, 5*time.Second)
		defer gcancel()
		_, err := client.Generate(gctx, requester, drvSubj, req, nil)
		return err == nil
	})
	cancel()
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.calls) < 9 || len(log.calls)%3 != 0 {
		t.Fatalf("calls %q: want prefetch, forward, pick for each of 3 or more steps", log.calls)
	}
	for i := 0; i < len(log.calls); i += 3 {
		p, f, k := log.calls[i], log.calls[i+1], log.calls[i+2]
		if !strings.HasPrefix(p, "prefetch ") || !strings.HasPrefix(f, "forward ") || !strings.HasPrefix(k, "pick ") ||
			p[len("prefetch"):] != f[len("forward"):] || p[len("prefetch"):] != k[len("pick"):] {
			t.Fatalf("step %d: calls %q, want prefetch, forward, pick of the same rows", i/3, log.calls[i:i+3])
		}
	}
}

// TestPickSkipsPrefilling: a row being prefilled is not sampled, by
// either picker and in every noise mode: NoToken and no error even when
// its logits row is NaN (a worker need not write it), and the rows around
// it get the tokens they get without it.
func TestPickSkipsPrefilling(t *testing.T) {
	const vocab = 512
	ex, err := NewSynthetic(SyntheticConfig{Vocab: vocab, EOS: -1, Logits: true})
	if err != nil {
		t.Fatal(err)
	}
	pool, err := noisepool.New(noisepool.Config{Vocab: vocab, Rows: 16, Producers: 1, Lookahead: 1, MaxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	pickers := map[string]Picker{
		"greedy": Greedy{},
		"inline": NewSamplingWith(SamplingConfig{Vocab: vocab, EOS: -1, Base: 9, Noise: NoiseInline}),
		"sync":   NewSamplingWith(SamplingConfig{Vocab: vocab, EOS: -1, Base: 9, Noise: NoiseSync}),
		"pool":   NewSamplingWith(SamplingConfig{Vocab: vocab, EOS: -1, Base: 9, Noise: NoisePool, Pool: pool}),
	}
	rows := []*Seq{
		{ID: 1, Prompt: []int32{1, 7}, Output: []int32{3}, Fed: 3},
		{ID: 2, Prompt: []int32{2, 7, 9, 11}, Fed: 2}, // prefilling
		{ID: 3, Prompt: []int32{3, 7}, Fed: 2},
	}
	reqs := []*Request{{Params: api.DefaultParams()}, {Params: api.DefaultParams()}, {Params: api.DefaultParams()}}
	for name, p := range pickers {
		logits, err := ex.Forward(t.Context(), Batch{Rows: rows})
		if err != nil {
			t.Fatal(err)
		}
		for j := range vocab {
			logits[vocab+j] = float32(math.NaN())
		}
		tokens, errs := []int32{9, 9, 9}, make([]error, 3)
		p.Pick(rows, reqs, logits, vocab, tokens, errs)
		alone := []*Seq{rows[0], rows[2]}
		want, wantErrs := []int32{9, 9}, make([]error, 2)
		la, err := ex.Forward(t.Context(), Batch{Rows: alone})
		if err != nil {
			t.Fatal(err)
		}
		p.Pick(alone, []*Request{reqs[0], reqs[2]}, la, vocab, want, wantErrs)
		if tokens[1] != NoToken || errs[1] != nil || errs[0] != nil || errs[2] != nil {
			t.Errorf("%s: tokens %v, errors %v; want NoToken and no error for the prefilling row", name, tokens, errs)
		}
		if tokens[0] != want[0] || tokens[2] != want[1] {
			t.Errorf("%s: tokens %v around a prefilling row, %v without it", name, tokens, want)
		}
	}
}
