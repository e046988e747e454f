package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tpcoord/tpcoord/internal/poll"
)

// serveGateway starts `tpcoord serve` for job on nats, as its own process,
// and returns its base URL once /ready answers 200.
func serveGateway(t *testing.T, nats, job string, extra ...string) string {
	t.Helper()
	port := pickPort(t, false)
	var out syncBuffer
	cmd := exec.Command(tpcoordBin, append([]string{"serve", "--nats", nats, "--job", job,
		"--listen", "127.0.0.1:" + strconv.Itoa(port), "--log-format", "text"}, extra...)...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("gateway output:\n%s", out.String())
		}
	})
	url := "http://127.0.0.1:" + strconv.Itoa(port)
	poll.UntilDetail(t, time.Minute, "the gateway ready", func() (bool, string) {
		resp, err := http.Get(url + "/ready")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == 200, resp.Status
	})
	return url
}

// sseResult is what one streaming completion delivered: its tokens in
// arrival order (token_ids of every chunk), its finish reason, and any
// error event.
type sseResult struct {
	tokens []int32
	finish string
	err    string
}

// streamCompletion sends a streaming completion of prompt 1,2,3 with seed
// and max tokens, and reads it to [DONE]; first, if set, is signalled
// once a token has arrived.
func streamCompletion(url string, seed, maxTokens int, first func()) (sseResult, error) {
	body := fmt.Sprintf(`{"prompt":[1,2,3],"max_tokens":%d,"seed":%d,"temperature":0.8,"ignore_eos":true,"stream":true}`, maxTokens, seed)
	resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		return sseResult{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		return sseResult{}, fmt.Errorf("status %d: %s", resp.StatusCode, b.String())
	}
	var s sseResult
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			return s, nil
		}
		var ev struct {
			Choices []struct {
				TokenIDs     []int32 `json:"token_ids"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			Error *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			return s, fmt.Errorf("event %q: %w", data, err)
		}
		if ev.Error != nil {
			s.err = ev.Error.Message
			continue
		}
		for _, c := range ev.Choices {
			if len(c.TokenIDs) > 0 && len(s.tokens) == 0 && first != nil {
				first()
			}
			s.tokens = append(s.tokens, c.TokenIDs...)
			if c.FinishReason != nil {
				s.finish = *c.FinishReason
			}
		}
	}
	return s, fmt.Errorf("the stream ended without [DONE] after %d tokens: %w", len(s.tokens), sc.Err())
}

// TestRank0KilledStreamsContinue (issue 37): agents started by hand under
// --on-peer-loss wait, behind a standalone gateway (tpcoord serve). 20
// seeded streaming completions are in flight when rank 0 is SIGKILLed; it
// is started again with the same command (as systemd would). Every stream
// ends with all its tokens, equal to an undisturbed run's, with none
// duplicated or missing: the gateway resubmits each request with the
// tokens it has, and the new rank 0 continues it at the same noise
// positions.
func TestRank0KilledStreamsContinue(t *testing.T) {
	const n, maxTokens = 20, 120
	m := newManualJob(t, "e2e-zero-loss", 2, "--forward-time", "20ms", "--on-peer-loss", "wait", "--max-batch", "32")
	m.startAll(2)
	m.waitRunning(2)
	url := serveGateway(t, m.nats, m.job)
	want, werrs := make([]sseResult, n), make([]error, n)
	var ref sync.WaitGroup
	for i := range n {
		ref.Go(func() { want[i], werrs[i] = streamCompletion(url, 100+i, maxTokens, nil) })
	}
	ref.Wait()
	for i := range n {
		if werrs[i] != nil || want[i].err != "" || len(want[i].tokens) != maxTokens {
			t.Fatalf("undisturbed request %d: %+v %v", i, want[i], werrs[i])
		}
	}
	var started sync.WaitGroup
	started.Add(n)
	got, errs := make([]sseResult, n), make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			var once sync.Once
			got[i], errs[i] = streamCompletion(url, 100+i, maxTokens, func() { once.Do(started.Done) })
		})
	}
	started.Wait() // every stream has tokens: the kill cuts each mid-way
	old := m.agents[0]
	if err := old.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-old.exited
	killed := time.Now()
	m.start(0)
	wg.Wait()
	t.Logf("every stream ended %v after the kill", time.Since(killed).Round(10*time.Millisecond))
	for i := range n {
		switch {
		case errs[i] != nil || got[i].err != "":
			t.Errorf("request %d: %v %q after %d tokens", i, errs[i], got[i].err, len(got[i].tokens))
		case !slices.Equal(got[i].tokens, want[i].tokens) || got[i].finish != want[i].finish:
			t.Errorf("request %d: %d tokens (%s), undisturbed %d (%s); first difference at %d", i,
				len(got[i].tokens), got[i].finish, len(want[i].tokens), want[i].finish, firstDiff(got[i].tokens, want[i].tokens))
		}
	}
}

func firstDiff(a, b []int32) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
