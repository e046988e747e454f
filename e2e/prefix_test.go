package e2e

import (
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/tpcoord/tpcoord/broadcast/api"
)

// prefixRequest is one request of the prefix workload: greedy or seeded.
func prefixRequest(prompt []int32, maxTokens int, seed int) *api.GenerateRequest {
	p := api.DefaultParams()
	p.IgnoreEOS, p.Temperature = true, 0 // greedy
	if seed > 0 {
		s := uint64(seed)
		p.Temperature, p.TopK, p.Seed = 0.8, 50, &s
	}
	return &api.GenerateRequest{PromptTokenIDs: slices.Clone(prompt), MaxTokens: maxTokens, Params: p}
}

// tokens returns n token IDs below vocab, a function of salt.
func tokens(n, salt, vocab int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32((salt*7919 + i*104729 + 11) % vocab)
	}
	return out
}

// runPrefixWorkload runs what real traffic repeats against j and returns
// every request's tokens in a fixed order:
//   - 12 requests at once, each one of 3 system prompts (sys tokens) and
//     a distinct suffix, greedy and seeded;
//   - 3 groups of n = 4 choices of one prompt (seeds differ), each group
//     sent at once;
//   - 4 chat conversations of turns turns, concurrently: each turn
//     resends the whole conversation (the last prompt, the answer it
//     got, a new user message).
func runPrefixWorkload(t *testing.T, j *job, vocab, sys, turns int) [][]int32 {
	t.Helper()
	var all [][]int32
	var reqs []*api.GenerateRequest
	for i := range 12 {
		prompt := append(tokens(sys, i%3, vocab), tokens(8+i*3, 100+i, vocab)...)
		reqs = append(reqs, prefixRequest(prompt, 12, i%2*(500+i)))
	}
	all = append(all, mustGenerate(t, j, reqs)...)
	for g := range 3 {
		prompt := append(tokens(sys, 200+g, vocab), tokens(5, 300+g, vocab)...)
		reqs = reqs[:0]
		for c := range 4 {
			reqs = append(reqs, prefixRequest(prompt, 10, 900+10*g+c))
		}
		all = append(all, mustGenerate(t, j, reqs)...)
	}
	chats := make([][][]int32, 4)
	var wg sync.WaitGroup
	for c := range chats {
		wg.Go(func() {
			prompt := tokens(sys, 400+c, vocab)
			for turn := range turns {
				prompt = append(prompt, tokens(6+turn, 500+10*c+turn, vocab)...)
				out, errs := generateJob(t, j, []*api.GenerateRequest{prefixRequest(prompt, 8, c%2*(700+turn))})
				if errs[0] != nil {
					t.Errorf("chat %d turn %d: %v", c, turn, errs[0])
					return
				}
				chats[c] = append(chats[c], out[0])
				prompt = append(prompt, out[0]...)
			}
		})
	}
	wg.Wait()
	for _, c := range chats {
		all = append(all, c...)
	}
	return all
}

// mustGenerate sends reqs at once and returns their tokens.
func mustGenerate(t *testing.T, j *job, reqs []*api.GenerateRequest) [][]int32 {
	t.Helper()
	out, errs := generateJob(t, j, reqs)
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return out
}

// prefixHits is rank 0's prefix cache counters.
func prefixHits(t *testing.T, j *job) (queries, hits uint64) {
	t.Helper()
	var sts []struct {
		Rank int `json:"rank"`
		KV   *struct {
			Queries uint64 `json:"prefix_cache_queries"`
			Hits    uint64 `json:"prefix_cache_hits"`
		} `json:"kv"`
	}
	if err := statusInto(j, &sts); err != nil {
		t.Fatal(err)
	}
	for _, st := range sts {
		if st.Rank == 0 && st.KV != nil {
			return st.KV.Queries, st.KV.Hits
		}
	}
	t.Fatal("rank 0 reports no KV cache")
	return 0, 0
}

// comparePrefixRuns checks that caching on and off gave the same tokens,
// that the job with caching hit and the one without did not.
func comparePrefixRuns(t *testing.T, on, off [][]int32, onHits, offHits, onQueries uint64) {
	t.Helper()
	if len(on) != len(off) {
		t.Fatalf("%d results with caching, %d without", len(on), len(off))
	}
	for i := range on {
		if !slices.Equal(on[i], off[i]) {
			t.Errorf("request %d: with prefix caching %v, without %v", i, on[i], off[i])
		}
	}
	t.Logf("prefix cache: %d of %d tokens hit (%.0f%%); caching off: %d hits", onHits, onQueries, 100*float64(onHits)/float64(max(onQueries, 1)), offHits)
	if onHits == 0 || offHits != 0 {
		t.Errorf("hits %d with caching, %d without: want some, and none", onHits, offHits)
	}
}

// TestPrefixCachingSameTokens: `tpcoord worker` with a pool (whose
// logits are computed from the tokens read back through each row's block
// table, so a wrong shared block changes them) gives exactly the same
// tokens with prefix caching on (the default) and off, over shared
// system prompts, n = 4 choices and multi-turn chats; with caching the
// job hits.
func TestPrefixCachingSameTokens(t *testing.T) {
	const vocab = 4096
	run := func(name string, extra ...string) ([][]int32, uint64, uint64) {
		args := append([]string{"--nproc", "2", "--job", "e2e-prefix-" + name, "--vocab", strconv.Itoa(vocab), "--max-batch", "8",
			"--max-num-batched-tokens", "96", "--executor", "worker", "--forward-timeout", "60s",
			"--worker-cmd", tpcoordBin + " worker --socket {socket} --log-format text --kv-blocks 160 --block-size 16 --max-model-len 2048"}, extra...)
		j := launch(t, args...)
		got := runPrefixWorkload(t, j, vocab, 70, 5)
		q, h := prefixHits(t, j)
		stopAndCheckDigests(t, j, 2)
		return got, q, h
	}
	on, onQ, onH := run("on")
	off, _, offH := run("off", "--enable-prefix-caching=false")
	comparePrefixRuns(t, on, off, onH, offH, onQ)
}
