package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tpcoord/tpcoord/internal/poll"
)

// openStream is one raw HTTP completion stream of the gateway, read after
// its first token.
type openStream struct {
	resp *http.Response
	body *bufio.Reader
}

// openStreams starts n streamed completions that run far longer than a
// test, and returns them once each has sent a token.
func openStreams(t *testing.T, oj *openaiJob, n int) []*openStream {
	t.Helper()
	out := make([]*openStream, n)
	for i := range out {
		body := fmt.Sprintf(`{"model":%q,"prompt":[%d,2,3],"max_tokens":50000,"ignore_eos":true,"stream":true,"seed":%d}`, oj.info.Job, 1+i, i)
		req, err := http.NewRequestWithContext(testContext(t, 3*time.Minute), http.MethodPost, oj.info.HTTPURL+"/completions", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("stream %d: status %d", i, resp.StatusCode)
		}
		s := &openStream{resp: resp, body: bufio.NewReader(resp.Body)}
		if _, err := s.body.ReadString('\n'); err != nil {
			t.Fatalf("stream %d: first event: %v", i, err)
		}
		out[i] = s
	}
	return out
}

// end reads s to its end: the code of its last event if that is an
// OpenAI error event ("" if not), and whether [DONE] came last.
func (s *openStream) end() (code string, done bool, last string) {
	for {
		line, err := s.body.ReadString('\n')
		if data, ok := strings.CutPrefix(strings.TrimSpace(line), "data: "); ok {
			if data == "[DONE]" {
				return code, true, last
			}
			last, code = data, ""
			var e struct {
				Error *struct {
					Code *string `json:"code"`
				} `json:"error"`
			}
			if json.Unmarshal([]byte(data), &e) == nil && e.Error != nil {
				code = "(none)"
				if e.Error.Code != nil {
					code = *e.Error.Code
				}
			}
		}
		if err != nil {
			return code, false, last
		}
	}
}

// checkStreamsEnd checks that every stream, and the openai-go client's,
// ends with an error event of code want and then [DONE]: none is cut.
func checkStreamsEnd(t *testing.T, streams []*openStream, sdk interface {
	Next() bool
	Err() error
}, want string) {
	t.Helper()
	for i, s := range streams {
		if code, done, last := s.end(); code != want || !done {
			t.Errorf("stream %d: last event %q (error code %q), [DONE] %v; want an error event (%s), then [DONE]", i, last, code, done, want)
		}
	}
	for sdk.Next() {
	}
	if err := sdk.Err(); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("openai-go stream: %v, want an error naming %s", err, want)
	}
}

// openSDKStream starts one more long stream through the openai-go client,
// read after its first chunk.
func openSDKStream(t *testing.T, oj *openaiJob) interface {
	Next() bool
	Err() error
} {
	t.Helper()
	s := oj.client.Completions.NewStreaming(testContext(t, 3*time.Minute), seeded(oj.info.Job, 9, 50000), ignoreEOS)
	t.Cleanup(func() { _ = s.Close() })
	if !s.Next() {
		t.Fatalf("openai-go stream: %v", s.Err())
	}
	return s
}

// TestSIGTERMEndsStreams: SIGTERM to launch --http with streams open.
// After the gateway's shutdown grace every stream ends with an error
// event (shutting_down) and [DONE] instead of being cut, and launch then
// stops the job cleanly.
func TestSIGTERMEndsStreams(t *testing.T) {
	oj := launchHTTP(t, "", "--job", "e2e-sigterm-streams", "--forward-time", "20ms")
	streams := openStreams(t, oj, 4)
	sdk := openSDKStream(t, oj)
	if err := oj.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	checkStreamsEnd(t, streams, sdk, "shutting_down")
	if err := oj.wait(time.Minute); err != nil {
		t.Errorf("launch after SIGTERM: %v, want a clean exit", err)
	}
}

// TestFollowerKilledUnderWaitEndsStreams: launch --http --on-peer-loss
// wait --max-restarts 0, a follower SIGKILLed mid-stream. launch does not
// start it again: it stops the job, so rank 0 holds the requests for a
// world that will not re-form; after the gateway's shutdown grace every
// stream ends with an error event and [DONE] instead of being cut. (With
// restarts, the default, the streams go on: TestLaunchRestartsFailedRanks.)
func TestFollowerKilledUnderWaitEndsStreams(t *testing.T) {
	oj := launchHTTP(t, "", "--job", "e2e-wait-streams", "--forward-time", "20ms", "--on-peer-loss", "wait", "--max-restarts", "0")
	streams := openStreams(t, oj, 4)
	sdk := openSDKStream(t, oj)
	poll.UntilDetail(t, 30*time.Second, "rank 0 decoding every stream", func() (bool, string) {
		ranks, err := oj.status()
		return err == nil && len(ranks) == 2 && ranks[0].Rows == len(streams)+1, fmt.Sprintf("%+v %v", ranks, err)
	})
	if err := syscall.Kill(oj.info.PIDs[1], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	checkStreamsEnd(t, streams, sdk, "shutting_down")
	if err := oj.wait(time.Minute); err == nil {
		t.Error("launch exited 0 after a rank died")
	}
}
