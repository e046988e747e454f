package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/tpcoord/tpcoord/internal/freeport"
	"github.com/tpcoord/tpcoord/internal/poll"
)

// TestServeModelReadme runs the README's serve-model commands as written
// there (the checkpoint in a temporary directory instead of /tmp, a free
// port added): make-checkpoint.py writes the model with its tokenizer,
// then `tpcoord serve-model DIR -tp 2` serves it. The model /v1/models
// lists answers a chat completion and a completion with text, through
// the openai-go client; SIGTERM stops it, with every rank and worker.
func TestServeModelReadme(t *testing.T) {
	py := torchPython(t)
	dir := filepath.Join(t.TempDir(), "tiny-llama")
	mk, serve := readmeServeModel(t, dir)
	cmd := exec.Command(py, strings.Fields(mk)...)
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", mk, err, out)
	}
	port, err := freeport.Pick("127.0.0.1", false)
	if err != nil {
		t.Fatal(err)
	}
	log := &syncBuffer{}
	cmd = exec.Command(tpcoordBin, append(strings.Fields(serve), "--port", strconv.Itoa(port), "--log-format", "text")...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = "..", log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		killLeft(dir)
		if t.Failed() {
			t.Logf("serve-model output:\n%s", tail(log.String(), 60))
		}
	})
	base := fmt.Sprintf("http://127.0.0.1:%d/v1", port)
	model := servedModel(t, base, exited)
	if model != "tiny-llama" {
		t.Errorf("/v1/models lists %q, want the directory's name tiny-llama", model)
	}
	client := newOpenAIClient(base, "")
	checkChatText(t, client, model)
	checkCompletionText(t, client, model)

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("serve-model after SIGTERM: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("serve-model did not exit within 60s of SIGTERM")
	}
	poll.UntilDetail(t, 20*time.Second, "no rank or worker of the model left", func() (bool, string) {
		left := processesWith(dir)
		return len(left) == 0, fmt.Sprint(left)
	})
}

// readmeServeModel returns the README's make-checkpoint.py arguments and
// serve-model command (after "go run ./cmd/tpcoord"), on dir instead of
// /tmp/tiny-llama.
func readmeServeModel(t *testing.T, dir string) (mk, serve string) {
	t.Helper()
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(readme), "/tmp/tiny-llama", dir)
	m := regexp.MustCompile(`(?m)^/usr/bin/python3 (scripts/make-checkpoint\.py .*?)\s+#`).FindStringSubmatch(text)
	s := regexp.MustCompile(`(?m)^go run ./cmd/tpcoord (serve-model .*)$`).FindStringSubmatch(text)
	if m == nil || s == nil {
		t.Fatal("the README has no make-checkpoint.py command, or no 'go run ./cmd/tpcoord serve-model ...'")
	}
	if !strings.Contains(s[1], " -tp 2") {
		t.Errorf("the README's serve-model command %q has no -tp 2", s[1])
	}
	return m[1], s[1]
}

// servedModel polls base's /v1/models until it lists a model, and returns
// its ID; it fails the test if serve-model exits first.
func servedModel(t *testing.T, base string, exited <-chan error) string {
	t.Helper()
	var model string
	poll.UntilDetail(t, 3*time.Minute, "/v1/models", func() (bool, string) {
		select {
		case err := <-exited:
			t.Fatalf("serve-model exited before serving: %v", err)
		default:
		}
		resp, err := http.Get(base + "/models")
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		var list struct {
			Data []struct {
				ID string `json:"id"`
			} `json:"data"`
		}
		if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&list) != nil || len(list.Data) == 0 {
			return false, resp.Status
		}
		model = list.Data[0].ID
		return true, ""
	})
	return model
}

func checkChatText(t *testing.T, client openai.Client, model string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model:               openai.ChatModel(model),
		Messages:            []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say hello.")},
		MaxCompletionTokens: openai.Int(8),
		Seed:                openai.Int(1),
	}, ignoreEOS)
	if err != nil {
		t.Fatalf("chat completion: %v", err)
	}
	if len(c.Choices) != 1 || c.Choices[0].Message.Content == "" || c.Usage.CompletionTokens != 8 {
		t.Errorf("chat completion without 8 tokens of text: %s", c.RawJSON())
	}
}

func checkCompletionText(t *testing.T, client openai.Client, model string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := client.Completions.New(ctx, textPrompt(model, "Once upon a time", 2, 8), ignoreEOS)
	if err != nil {
		t.Fatalf("completion: %v", err)
	}
	if len(c.Choices) != 1 || c.Choices[0].Text == "" || c.Usage.CompletionTokens != 8 || c.Usage.PromptTokens < 2 {
		t.Errorf("completion without 8 tokens of text: %s", c.RawJSON())
	}
}

// processesWith returns the PIDs whose command line mentions dir: the
// ranks (their --worker-cmd names it) and the workers (--model).
func processesWith(dir string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(cmdline, []byte(dir)) && alive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// killLeft kills what processesWith(dir) finds, so a failed test leaves
// nothing running.
func killLeft(dir string) {
	for _, pid := range processesWith(dir) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}
