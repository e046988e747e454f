package rank

import (
	"context"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"
	"weak"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/noisepool"
	"github.com/tpcoord/tpcoord/rank/client"

	"github.com/tpcoord/tpcoord/sampler"
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
		params := sampler.DefaultParams()
		params.Temperature, params.Seed = temp, &seed
		rows = append(rows, &Seq{ID: uint64(i + 1), Prompt: []int32{int32(i), 7}, Output: []int32{3}})
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

// NoiseSync only moves where the noise is made: same tokens as inline.
func TestSamplingNoiseSyncSameTokens(t *testing.T) {
	temps := []float32{0.8, 1, 0, 1.3, 0.5}
	inline := pickAll(t, NewSamplingWith(SamplingConfig{Vocab: 512, EOS: -1, Base: 9, Noise: NoiseInline}), temps)
	sync := pickAll(t, NewSamplingWith(SamplingConfig{Vocab: 512, EOS: -1, Base: 9, Noise: NoiseSync}), temps)
	if !slices.Equal(inline, sync) {
		t.Fatalf("inline %v, sync %v", inline, sync)
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
	req := &client.GenerateRequest{PromptTokenIDs: []int32{5, 6, 7}, MaxTokens: 6}
	want, _ := predict(t, req)
	var rep *client.GenerateReply
	eventually(t, 10*time.Second, "generate did not succeed", func() bool {
		gctx, gcancel := context.WithTimeout(ctx, 5*time.Second)
		defer gcancel()
		var err error
		rep, err = client.Generate(gctx, requester, drvSubj, req, nil)
		return err == nil
	})
	if !slices.Equal(rep.Tokens, want) {
		t.Fatalf("tokens %v, want %v", rep.Tokens, want)
	}
	eventually(t, 10*time.Second, "follower did not pick", func() bool { return fp.rows.Load() >= int64(len(want)) })
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
	req := &Request{Params: sampler.DefaultParams()}
	req.Params.Seed = &seed
	rows := []*Seq{{ID: 1, Prompt: []int32{5}}, {ID: 2, Prompt: []int32{6}, Output: []int32{7}}}
	tokens, errs := make([]int32, 2), make([]error, 2)
	p.Pick(rows, []*Request{req, nil}, logits, vocab, tokens, errs)
	for i, err := range errs {
		if err != nil || tokens[i] < 0 {
			t.Fatalf("row %d: token %d, %v", i, tokens[i], err)
		}
	}
	return weak.Make(&logits[0]), weak.Make(req)
}
