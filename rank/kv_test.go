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
	ctx, cancel := context.WithCancel(context.Background())
	c := &cluster{hub: broadcast.NewHub(), cancel: cancel}
	c.requester = c.hub.Connect()
	t.Cleanup(c.requester.Close)
	for r := range 2 {
		cfg := driverConfig(r, 2)
		cfg.MaxBatch, cfg.MaxQueue, cfg.KV = 8, 64, kv
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
