package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tpcoord/tpcoord/broadcast/api"
)

// kvRequests are n seeded requests whose prompts (40 to 250 tokens) and
// outputs together need far more than a small KV pool.
func kvRequests(n, vocab int) []*api.GenerateRequest {
	reqs := make([]*api.GenerateRequest, n)
	for i := range reqs {
		prompt := make([]int32, 40+(i*53)%211)
		for j := range prompt {
			prompt[j] = int32((131*i + 17*j + 5) % vocab)
		}
		p := api.DefaultParams()
		seed := uint64(7000 + i)
		p.Temperature, p.TopK, p.Seed, p.IgnoreEOS = 0.8, 50, &seed, true
		if i%3 == 0 {
			p.Temperature, p.TopK, p.Seed = 0, 0, nil // greedy
		}
		reqs[i] = &api.GenerateRequest{PromptTokenIDs: prompt, MaxTokens: 20 + (i*7)%40, Params: p}
	}
	return reqs
}

// generateJob sends every request to j at once and returns each one's
// tokens and error, giving them 3 minutes.
func generateJob(t *testing.T, j *job, reqs []*api.GenerateRequest) ([][]int32, []error) {
	t.Helper()
	return generateWithin(t, j, reqs, 3*time.Minute)
}

// generateWithin is generateJob with a deadline of d.
func generateWithin(t *testing.T, j *job, reqs []*api.GenerateRequest, d time.Duration) ([][]int32, []error) {
	t.Helper()
	nc, subj := connect(t, j)
	out, errs := make([][]int32, len(reqs)), make([]error, len(reqs))
	for i, r := range generateAllWithin(nc, subj, reqs, d) {
		if errs[i] = r.err; r.err == nil {
			out[i] = r.rep.Tokens
		}
	}
	return out, errs
}

// kvStatus is what status says of memory.
type kvStatus struct {
	Rank          int    `json:"rank"`
	Step          uint64 `json:"step"`
	Digest        string `json:"digest"`
	MaxStepTokens int    `json:"max_step_tokens"`
	MaxModelLen   int    `json:"max_model_len"`
	KV            *struct {
		BlockSize   int    `json:"block_size"`
		Blocks      int    `json:"blocks"`
		Used        int    `json:"used"`
		Preemptions uint64 `json:"preemptions"`
	} `json:"kv"`
}

// TestKVPagedWorkerSameTokens: `tpcoord worker` reports a pool of 40
// blocks of 16 tokens and a context of 1,024 at its handshake (protocol
// 3); rank 0 schedules that pool with a step budget of 64 tokens. 24
// concurrent requests that need several times the pool all finish with
// exactly the tokens of a job without memory scheduling (the synthetic
// executor), rank 0 preempted some, no forward pass fed more than the
// budget on any rank, every worker checked every block table it was
// sent, and a request longer than the context is refused naming it.
func TestKVPagedWorkerSameTokens(t *testing.T) {
	const vocab = 4096
	reqs := kvRequests(24, vocab)
	base := []string{"--nproc", "2", "--vocab", strconv.Itoa(vocab), "--max-batch", "8"}
	want, errs := generateJob(t, launch(t, append(base, "--job", "e2e-kv-base", "--forward-time", "1ms")...), reqs)
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}

	j := launch(t, append(base, "--job", "e2e-kv", "--http", "127.0.0.1:0", "--executor", "worker", "--forward-timeout", "60s", "--max-num-batched-tokens", "64",
		"--worker-cmd", tpcoordBin+" worker --socket {socket} --log-format text --kv-blocks 40 --block-size 16 --max-model-len 1024")...)
	got, errs := generateJob(t, j, reqs)
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for i := range reqs {
		if fmt.Sprint(got[i]) != fmt.Sprint(want[i]) {
			t.Errorf("request %d (prompt %d, max_tokens %d): paged %v, unscheduled %v", i, len(reqs[i].PromptTokenIDs), reqs[i].MaxTokens, got[i], want[i])
		}
	}

	long := &api.GenerateRequest{PromptTokenIDs: make([]int32, 1000), MaxTokens: 100, Params: api.DefaultParams()}
	if _, errs := generateJob(t, j, []*api.GenerateRequest{long}); errs[0] == nil ||
		!strings.Contains(errs[0].Error(), "maximum context length is 1024 tokens") || !strings.Contains(errs[0].Error(), "you requested 1100 tokens") {
		t.Errorf("1,000 + 100 tokens on a context of 1,024: %v, want vLLM's refusal naming both", errs[0])
	}

	checkKVOverHTTP(t, j)

	var sts []kvStatus
	if err := statusInto(j, &sts); err != nil {
		t.Fatal(err)
	}
	for _, st := range sts {
		if st.MaxStepTokens < 1 || st.MaxStepTokens > 64 {
			t.Errorf("rank %d: largest forward pass fed %d tokens, want 1 to the budget of 64", st.Rank, st.MaxStepTokens)
		}
		if st.Rank != 0 {
			continue
		}
		if st.KV == nil || st.KV.Blocks != 40 || st.KV.BlockSize != 16 || st.MaxModelLen != 1024 {
			t.Errorf("rank 0 schedules %+v with max_model_len %d, want the worker's 40 blocks of 16 and 1024", st.KV, st.MaxModelLen)
		} else if st.KV.Preemptions == 0 {
			t.Errorf("rank 0 preempted nothing: the workload did not test preemption")
		}
	}
	stopAndCheckDigests(t, j, 2)
}

// checkKVOverHTTP: over the job's OpenAI API, a request past the
// worker's context is a 400 in vLLM's words, and the gateway's /metrics
// shows rank 0's KV cache and its preemptions.
func checkKVOverHTTP(t *testing.T, j *job) {
	t.Helper()
	ids := make([]string, 1000)
	for i := range ids {
		ids[i] = strconv.Itoa(i % 100)
	}
	body := `{"prompt":[` + strings.Join(ids, ",") + `],"max_tokens":100}`
	resp, err := http.Post(j.info.HTTPURL+"/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(msg), "maximum context length is 1024 tokens") {
		t.Errorf("HTTP, 1,000 + 100 tokens on a context of 1,024: %d %s, want 400 naming the context", resp.StatusCode, msg)
	}
	resp, err = http.Get(strings.TrimSuffix(j.info.HTTPURL, "/v1") + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(metrics), "tpcoord_kv_cache_usage_perc{") {
		t.Errorf("the gateway's /metrics lacks tpcoord_kv_cache_usage_perc")
	}
	preempted := 0.0
	for _, line := range strings.Split(string(metrics), "\n") {
		if f := strings.Fields(line); len(f) == 2 && strings.HasPrefix(f[0], "tpcoord_num_preemptions_total{") {
			preempted, _ = strconv.ParseFloat(f[1], 64)
		}
	}
	if preempted == 0 {
		t.Errorf("the gateway's /metrics counts no preemption:\n%s", metrics)
	}
}

// TestKVCapacityMismatchStopsJob: ranks whose workers report different
// pools stop the job, naming the rank and both figures; --kv-blocks at
// most the smallest pool makes them agree on what rank 0 schedules.
func TestKVCapacityMismatchStopsJob(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := runLaunch(ctx, "--nproc", "2", "--job", "e2e-kv-mismatch", "--vocab", "4096", "--log-format", "text",
		"--executor", "worker", "--worker-cmd", tpcoordBin+" worker --socket {socket} --log-format text --kv-blocks 4{rank} --max-model-len 512")
	if err == nil || ctx.Err() != nil {
		t.Fatalf("launch: %v (context %v), want the job to stop:\n%s", err, ctx.Err(), tail(out, 30))
	}
	if want := "blocks: rank 0 has 40, rank 1 has 41"; !strings.Contains(out, want) {
		t.Fatalf("launch output lacks %q:\n%s", want, tail(out, 30))
	}
	j := launch(t, "--nproc", "2", "--job", "e2e-kv-lowered", "--vocab", "4096", "--kv-blocks", "40",
		"--executor", "worker", "--worker-cmd", tpcoordBin+" worker --socket {socket} --log-format text --kv-blocks 4{rank} --max-model-len 512")
	if _, errs := generateJob(t, j, kvRequests(4, 4096)); errors.Join(errs...) != nil {
		t.Fatalf("pools of 40 and 41 blocks lowered to 40: %v", errors.Join(errs...))
	}
	stopAndCheckDigests(t, j, 2)
}

// runLaunch runs `tpcoord launch` with args to its end and returns its
// output.
func runLaunch(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, tpcoordBin, append([]string{"launch"}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// statusInto decodes `tpcoord status --json`'s ranks into ranks.
func statusInto(j *job, ranks any) error {
	out, err := exec.Command(tpcoordBin, "status", "--nats", j.info.NATSURL, "--job", j.info.Job, "--json").Output()
	if err != nil {
		return fmt.Errorf("status: %w", err)
	}
	if err := json.Unmarshal(out, &struct {
		Ranks any `json:"ranks"`
	}{ranks}); err != nil {
		return fmt.Errorf("status output %q: %w", out, err)
	}
	return nil
}
