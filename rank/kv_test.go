package rank

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/internal/poll"
	"github.com/tpcoord/tpcoord/rank/client"
	"github.com/tpcoord/tpcoord/rank/core"
)

// kvJob runs a 2-rank job whose rank 0 samples with seeded noise (the
// inline generator: the pool's rows are the same values) and schedules kv
// (nil: memory not scheduled).
func kvJob(t *testing.T, kv *core.KVConfig, m *Metrics) (*cluster, *runningRank) {
	t.Helper()
	return kvJobWith(t, kv, 0, m)
}

// kvJobWith is kvJob with a token budget (DriverConfig.MaxNumBatchedTokens).
func kvJobWith(t *testing.T, kv *core.KVConfig, budget int, m *Metrics) (*cluster, *runningRank) {
	t.Helper()
	return kvJobCaching(t, kv, budget, false, m)
}

// kvJobCaching is kvJobWith with prefix caching on or off.
func kvJobCaching(t *testing.T, kv *core.KVConfig, budget int, caching bool, m *Metrics) (*cluster, *runningRank) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c := &cluster{hub: broadcast.NewHub(), cancel: cancel}
	c.requester = c.hub.Connect()
	t.Cleanup(c.requester.Close)
	for r := range 2 {
		cfg := driverConfig(r, 2)
		cfg.MaxBatch, cfg.MaxQueue, cfg.KV, cfg.MaxNumBatchedTokens, cfg.PrefixCaching = 8, 64, kv, budget, caching
		if r == 0 {
			cfg.Metrics = m
		}
		ex, err := NewSynthetic(SyntheticConfig{Vocab: drvVocab, EOS: drvEOS, Logits: r == 0})
		if err != nil {
			t.Fatal(err)
		}
		pick := NewSamplingWith(SamplingConfig{Vocab: drvVocab, EOS: drvEOS, Base: 9, Noise: NoiseInline})
		c.ranks = append(c.ranks, runRankWith(t, ctx, c.hub.Connect(), cfg, ex, pick))
	}
	t.Cleanup(func() {
		cancel()
		for _, r := range c.ranks {
			_ = r.wait(t)
		}
	})
	waitServing(t, c.requester, 2)
	return c, c.ranks[0]
}

// kvRequest is request i of the load: seeded (every other one greedy),
// with prompts and lengths that differ.
func kvRequest(i int) *api.GenerateRequest {
	p := api.DefaultParams()
	seed := uint64(1000 + i)
	p.Seed = &seed
	if i%2 == 1 {
		p.Temperature = 0
	}
	prompt := []int32{int32(3 + i), int32(5 + 7*i), int32(11 + i*i)}[:1+i%3]
	return &api.GenerateRequest{PromptTokenIDs: prompt, MaxTokens: 12 + i%20, Params: p}
}

// TestDriverKVPreemptionSameTokens: 16 concurrent seeded and greedy
// requests through a KV cache a fraction of what they need: rank 0
// preempts (and recomputes) some, every rank stays in lockstep, and every
// request's tokens equal the same request's run alone on an idle job
// without memory scheduling, because a token is a function of the prompt,
// the parameters, the seed and the position only.
func TestDriverKVPreemptionSameTokens(t *testing.T) {
	const n = 16
	alone := make([][]int32, n)
	{
		c, _ := kvJob(t, nil, nil)
		for i := range n {
			rep, err := client.Generate(context.Background(), c.requester, drvSubj, kvRequest(i), nil)
			if err != nil {
				t.Fatal(err)
			}
			alone[i] = rep.Tokens
		}
		c.cancel()
	}
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	c, r0 := kvJob(t, &core.KVConfig{BlockSize: 4, Blocks: 12, Watermark: 1}, m)
	got := make([][]int32, n)
	errs := make(chan error, n)
	for i := range n {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			rep, err := client.Generate(ctx, c.requester, drvSubj, kvRequest(i), nil)
			if err == nil {
				got[i] = rep.Tokens
			}
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		if !slices.Equal(got[i], alone[i]) {
			t.Errorf("request %d: %v under memory pressure, %v alone", i, got[i], alone[i])
		}
	}
	kv := r0.d.Status().KV
	if kv == nil || kv.Preemptions == 0 || kv.Blocks != 12 {
		t.Fatalf("rank 0's kv status %+v: want preemptions in a pool of 12 blocks", kv)
	}
	poll.Until(t, 10*time.Second, "blocks still held after every request finished", func() bool { return r0.d.Status().KV.Used == 0 })
	text := scrape(t, reg)
	if v := sample(text, "tpcoord_num_preemptions_total"); v != float64(kv.Preemptions) {
		t.Errorf("tpcoord_num_preemptions_total %v, status says %d", v, kv.Preemptions)
	}
	if v := sample(text, "tpcoord_kv_cache_usage_perc"); v != 0 {
		t.Errorf("tpcoord_kv_cache_usage_perc %v once idle, want 0", v)
	}
	st := c.status(t)
	if st[0].Digest != st[1].Digest && st[0].Step == st[1].Step {
		t.Fatalf("ranks diverged: %+v", st)
	}
	var noted int
	var dump strings.Builder
	if err := r0.d.cfg.Flight.Dump(&dump, "rank 0", time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, st := range r0.d.cfg.Flight.Snapshot(0, time.Now()).Steps {
		noted += st.Preempted
	}
	if noted == 0 || !strings.Contains(dump.String(), " preempted ") {
		t.Errorf("the flight recorder noted %d preemptions of %d (its ring holds the last %d steps):\n%s", noted, kv.Preemptions, DefaultFlightSteps, dump.String())
	}
	t.Logf("%d preemptions, %d in the flight recorder's steps", kv.Preemptions, noted)
}

// chunkRequest is request i of a load of long prompts: seeded (every
// other one greedy), 10 to 49 tokens, several times the budget of
// TestDriverChunkedPrefillSameTokens.
func chunkRequest(i int) *api.GenerateRequest {
	req := kvRequest(i)
	prompt := make([]int32, 10+(i*7)%40)
	for j := range prompt {
		prompt[j] = int32(3 + (i*31+j*17)%(drvVocab-3))
	}
	req.PromptTokenIDs = prompt
	return req
}

// TestDriverChunkedPrefillSameTokens: 16 concurrent seeded and greedy
// requests with prompts longer than a budget of 8 tokens a step, through
// a small KV cache: their prompts are prefilled in chunks (and some
// preempted and prefilled again), no step feeds more than the budget on
// any rank, the ranks stay in lockstep, and every request's tokens equal
// the same request's run alone without a budget or memory scheduling.
func TestDriverChunkedPrefillSameTokens(t *testing.T) {
	const n, budget = 16, 8
	alone := make([][]int32, n)
	{
		c, _ := kvJob(t, nil, nil)
		for i := range n {
			rep, err := client.Generate(context.Background(), c.requester, drvSubj, chunkRequest(i), nil)
			if err != nil {
				t.Fatal(err)
			}
			alone[i] = rep.Tokens
		}
		c.cancel()
	}
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	c, r0 := kvJobWith(t, &core.KVConfig{BlockSize: 4, Blocks: 24, Watermark: 1}, budget, m)
	got := make([][]int32, n)
	errs := make(chan error, n)
	for i := range n {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			rep, err := client.Generate(ctx, c.requester, drvSubj, chunkRequest(i), nil)
			if err == nil {
				got[i] = rep.Tokens
			}
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		if !slices.Equal(got[i], alone[i]) {
			t.Errorf("request %d: %v with a budget of %d, %v alone", i, got[i], budget, alone[i])
		}
	}
	poll.Until(t, 10*time.Second, "blocks still held after every request finished", func() bool { return r0.d.Status().KV.Used == 0 })
	st := c.status(t)
	for _, s := range st {
		if s.MaxStepTokens < budget/2 || s.MaxStepTokens > budget {
			t.Errorf("rank %d: max_step_tokens %d, want the budget of %d reached but never exceeded", s.Rank, s.MaxStepTokens, budget)
		}
	}
	if v := sample(scrape(t, reg), "tpcoord_step_tokens_max"); v != float64(r0.d.Status().MaxStepTokens) {
		t.Errorf("tpcoord_step_tokens_max %v, status says %d", v, r0.d.Status().MaxStepTokens)
	}
	if st[0].Digest != st[1].Digest && st[0].Step == st[1].Step {
		t.Fatalf("ranks diverged: %+v", st)
	}
	t.Logf("%d preemptions, max step tokens %d", r0.d.Status().KV.Preemptions, st[0].MaxStepTokens)
}

// TestDriverBudgetBelowMaxBatch: a budget below MaxBatch is refused when
// the loop starts, naming both.
func TestDriverBudgetBelowMaxBatch(t *testing.T) {
	cfg := driverConfig(0, 1)
	cfg.MaxNumBatchedTokens = cfg.MaxBatch - 1
	ex, err := NewSynthetic(SyntheticConfig{Vocab: drvVocab, EOS: drvEOS, Logits: true})
	if err != nil {
		t.Fatal(err)
	}
	tr := broadcast.NewHub().Connect()
	defer tr.Close()
	err = NewDriver(cfg, tr, ex, Greedy{}).Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "MaxNumBatchedTokens (3)") || !strings.Contains(err.Error(), "MaxBatch (4)") {
		t.Fatalf("Run with a budget of 3 and MaxBatch 4: %v", err)
	}
}

// prefixRequest is request i of a load whose prompts share long
// prefixes: one of three 24-token system prompts, then a suffix of its
// own of 1 to 5 tokens.
func prefixRequest(i int) *api.GenerateRequest {
	req := kvRequest(i)
	k := i % 3
	prompt := make([]int32, 24, 29)
	for j := range prompt {
		prompt[j] = int32(3 + (k*31+j*17)%(drvVocab-3))
	}
	for j := range 1 + i%5 {
		prompt = append(prompt, int32(3+(i*13+j)%(drvVocab-3)))
	}
	req.PromptTokenIDs = prompt
	return req
}

// prefixRun sends the prefix load to a job with prefix caching on or
// off: the first four requests one after the other (so the later ones
// find the earlier ones' blocks whatever the timing), the rest at once.
// It returns every request's tokens, rank 0's KV status once every block
// is released, the tokens rank 0's steps fed in total, and the metrics.
func prefixRun(t *testing.T, n int, caching bool) ([][]int32, *api.KVStatus, int64, string) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	c, r0 := kvJobCaching(t, &core.KVConfig{BlockSize: 4, Blocks: 64, Watermark: 1}, 16, caching, m)
	defer c.cancel()
	got := make([][]int32, n)
	generate := func(i int) error {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		rep, err := client.Generate(ctx, c.requester, drvSubj, prefixRequest(i), nil)
		if err == nil {
			got[i] = rep.Tokens
		}
		return err
	}
	for i := range 4 {
		if err := generate(i); err != nil {
			t.Fatal(err)
		}
	}
	errs := make(chan error, n)
	for i := 4; i < n; i++ {
		go func() { errs <- generate(i) }()
	}
	for i := 4; i < n; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	poll.Until(t, 10*time.Second, "blocks still held after every request finished", func() bool { return r0.d.Status().KV.Used == 0 })
	if st := c.status(t); st[0].Digest != st[1].Digest && st[0].Step == st[1].Step {
		t.Fatalf("ranks diverged: %+v", st)
	}
	return got, r0.d.Status().KV, r0.d.fedTokens.Load(), scrape(t, reg)
}

// TestDriverPrefixCachingSameTokens: 16 seeded and greedy requests whose
// prompts share long prefixes, through a job with prefix caching and one
// without: every request has the same tokens in both, the ranks stay in
// lockstep, and with caching rank 0 finds prefixes (its status and
// metrics count them) and its forward passes feed fewer tokens.
func TestDriverPrefixCachingSameTokens(t *testing.T) {
	const n = 16
	off, offKV, offFed, _ := prefixRun(t, n, false)
	on, onKV, onFed, text := prefixRun(t, n, true)
	for i := range n {
		if !slices.Equal(on[i], off[i]) {
			t.Errorf("request %d: %v with prefix caching, %v without", i, on[i], off[i])
		}
	}
	if onKV.PrefixCacheHits == 0 || onKV.PrefixCacheQueries < onKV.PrefixCacheHits || offKV.PrefixCacheQueries != 0 || offKV.PrefixCacheHits != 0 {
		t.Fatalf("kv status with caching %+v, without %+v: want hits with, no lookups without", onKV, offKV)
	}
	if onFed >= offFed {
		t.Errorf("the steps fed %d tokens with prefix caching, %d without: want fewer", onFed, offFed)
	}
	if v := sample(text, "tpcoord_prefix_cache_hits_total"); v != float64(onKV.PrefixCacheHits) {
		t.Errorf("tpcoord_prefix_cache_hits_total %v, status says %d", v, onKV.PrefixCacheHits)
	}
	if v := sample(text, "tpcoord_prefix_cache_queries_total"); v != float64(onKV.PrefixCacheQueries) {
		t.Errorf("tpcoord_prefix_cache_queries_total %v, status says %d", v, onKV.PrefixCacheQueries)
	}
	t.Logf("%d of %d tokens hit; fed %d tokens with caching, %d without", onKV.PrefixCacheHits, onKV.PrefixCacheQueries, onFed, offFed)
}
