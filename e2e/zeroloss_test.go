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
	"github.com/tpcoord/tpcoord/rank"
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
// seeded streaming completions, and a tpcoord generate, are in flight when
// rank 0 is SIGKILLed; it is started again with the same command (as
// systemd would). Every stream ends with all its tokens, equal to an
// undisturbed run's, with none duplicated or missing: the gateway (and
// generate) resubmits each request with the tokens it has, and the new
// rank 0 continues it at the same noise positions.
func TestRank0KilledStreamsContinue(t *testing.T) {
	m := newManualJob(t, "e2e-zero-loss", 2, "--forward-time", "20ms", "--on-peer-loss", "wait", "--max-batch", "32")
	m.startAll(2)
	m.waitRunning(2)
	url := serveGateway(t, m.nats, m.job)
	// tpcoord generate (the Go client) across the same fault.
	gen := []string{"--prompt", "4,5,6", "--max-tokens", "400", "--ignore-eos", "--seed", "7", "--temperature", "0.8"}
	ctx, cancel := contextWithTimeout(3 * time.Minute)
	defer cancel()
	c := m.client()
	wantGen, err := c.generate(ctx, gen...)
	if err != nil {
		t.Fatal(err)
	}
	type genResult struct {
		g   generated
		err error
	}
	genDone := make(chan genResult, 1)
	go func() {
		g, err := c.generate(ctx, gen...)
		genDone <- genResult{g, err}
	}()
	streamsSurvive(t, url, "rank 0 SIGKILLed and started again", func() {
		select {
		case r := <-genDone:
			t.Fatalf("tpcoord generate ended before the kill: %+v", r)
		default:
		}
		old := m.agents[0]
		if err := old.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-old.exited
		m.start(0)
	})
	r := <-genDone
	if r.err != nil || !slices.Equal(r.g.Tokens, wantGen.Tokens) {
		t.Errorf("tpcoord generate across the kill: %v; %d tokens, first difference from the undisturbed run at %d", r.err, len(r.g.Tokens), firstDiff(r.g.Tokens, wantGen.Tokens))
	}
}

// streamsSurvive is issue 37's check of a fault: 20 seeded streaming
// completions of 120 tokens run undisturbed at url; then the same 20 again,
// and once every stream has a token, fault runs. Every stream must end with
// [DONE] and the undisturbed run's tokens and finish reason, none missing
// or duplicated.
func streamsSurvive(t *testing.T, url, what string, fault func()) {
	t.Helper()
	const n, maxTokens = 20, 120
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
	started.Wait() // every stream has tokens: the fault cuts each mid-way
	at := time.Now()
	fault()
	wg.Wait()
	t.Logf("%s: every stream ended %v after the fault began", what, time.Since(at).Round(10*time.Millisecond))
	for i := range n {
		switch {
		case errs[i] != nil || got[i].err != "":
			t.Errorf("%s: request %d: %v %q after %d tokens", what, i, errs[i], got[i].err, len(got[i].tokens))
		case !slices.Equal(got[i].tokens, want[i].tokens) || got[i].finish != want[i].finish:
			t.Errorf("%s: request %d: %d tokens (%s), undisturbed %d (%s); first difference at %d", what, i,
				len(got[i].tokens), got[i].finish, len(want[i].tokens), want[i].finish, firstDiff(got[i].tokens, want[i].tokens))
		}
	}
}

// TestLaunchRestartsFailedRanks (issue 37, finding 5): launch --http
// --on-peer-loss wait starts a rank that dies again, and the world
// re-forms with it. A follower SIGKILLed with 20 streams in flight, and
// then rank 0: every stream ends with the undisturbed run's tokens (they
// were cut with no [DONE] when launch stopped the job instead). A request
// that arrives while rank 0 waits for the world to re-form waits and gets
// its tokens. launch then stops cleanly on SIGTERM.
func TestLaunchRestartsFailedRanks(t *testing.T) {
	oj := launchHTTP(t, "", "--job", "e2e-launch-restarts", "--forward-time", "20ms", "--on-peer-loss", "wait", "--max-batch", "32")
	url := oj.root()
	late, err := streamCompletion(url, 999, 40, nil)
	if err != nil || late.err != "" {
		t.Fatalf("undisturbed late request: %+v %v", late, err)
	}
	var during sync.WaitGroup
	var got sseResult
	var gotErr error
	for _, r := range []int{1, 0} {
		var pid int
		streamsSurvive(t, url, fmt.Sprintf("rank %d SIGKILLed", r), func() {
			pid = oj.readyAgain().PIDs[r]
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			if r == 1 {
				poll.UntilDetail(t, time.Minute, "rank 0 waiting for the world to re-form", func() (bool, string) {
					ranks, err := oj.status()
					return err == nil && len(ranks) > 0 && ranks[0].State == rank.StateReforming, fmt.Sprintf("%+v %v", ranks, err)
				})
				during.Go(func() { got, gotErr = streamCompletion(url, 999, 40, nil) })
			}
		})
		if now := oj.readyAgain().PIDs[r]; now == pid || !alive(now) {
			t.Errorf("rank %d: pid %d in the ready file after its pid %d was killed, want its new process", r, now, pid)
		}
		if log := oj.log.String(); !strings.Contains(log, fmt.Sprintf("rank %d (pid %d) died; starting it again", r, pid)) {
			t.Errorf("launch did not say it started rank %d again:\n%s", r, tail(log, 20))
		}
	}
	during.Wait()
	if gotErr != nil || got.err != "" || !slices.Equal(got.tokens, late.tokens) {
		t.Errorf("a request sent while the world re-formed: %v %q, %d tokens, want the undisturbed %d", gotErr, got.err, len(got.tokens), len(late.tokens))
	}
	if _, err := oj.stop(syscall.SIGTERM, time.Minute); err != nil {
		t.Errorf("launch after its ranks were started again, on SIGTERM: %v, want a clean exit", err)
	}
}

// TestNATSRestartStreamsContinue (issue 37): launch --http on an external
// nats-server, under the default --on-peer-loss fail. With 20 streams in
// flight the server is SIGKILLed and started again on its port: the ranks
// and the gateway reconnect, and every stream ends with the undisturbed
// run's tokens.
func TestNATSRestartStreamsContinue(t *testing.T) {
	port := pickPort(t, false)
	srv := startNATSServer(t, port)
	oj := launchHTTP(t, "", "--job", "e2e-nats-restart-streams", "--forward-time", "20ms", "--max-batch", "32", "--nats", srv.url())
	streamsSurvive(t, oj.root(), "nats-server SIGKILLed and started again", func() {
		srv.kill()
		startNATSServer(t, port)
	})
	if err := syscall.Kill(oj.info.PIDs[0], 0); err != nil {
		t.Errorf("rank 0 after the restart: %v", err)
	}
}

// TestFrozenRank0StreamsContinue (issue 37, finding 6): launch --http
// --on-peer-loss wait with the default timeouts (heartbeats 1 s, client
// keepalives 2 s, memberlist's local timings). Rank 0 is SIGSTOPped for 5 s
// with 20 streams in flight, then SIGCONTed: the follower declares it lost
// and waits, the world re-forms, and every stream ends with the undisturbed
// run's tokens; rank 0 blames no client for its own stall.
func TestFrozenRank0StreamsContinue(t *testing.T) {
	const freeze = 5 * time.Second
	oj := launchHTTP(t, "", "--job", "e2e-frozen0-streams", "--forward-time", "20ms", "--max-batch", "32", "--on-peer-loss", "wait")
	rank0 := oj.info.PIDs[0]
	streamsSurvive(t, oj.root(), "rank 0 SIGSTOPped for 5 s", func() {
		if err := syscall.Kill(rank0, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = syscall.Kill(rank0, syscall.SIGCONT) })
		stopped := time.Now()
		// The freeze's length is what is tested: it is waited out, with
		// rank 0 seen stopped.
		poll.UntilDetail(t, time.Minute, "rank 0 stopped for 5 s", func() (bool, string) {
			state := procState(rank0)
			return state == 'T' && time.Since(stopped) > freeze, fmt.Sprintf("state %c", state)
		})
		if err := syscall.Kill(rank0, syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	})
	// Under the default timeouts the freeze is a fault, not a pause: the
	// follower declares rank 0 lost and the world re-forms.
	if log := oj.log.String(); strings.Contains(log, "client went away") || !strings.Contains(log, "world re-formed") {
		t.Errorf("rank 0 blamed its clients for its own stall, or the world did not re-form:\n%s", tail(log, 20))
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
