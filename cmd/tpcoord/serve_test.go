//go:build !agentonly

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// serve refuses what it cannot serve safely or at all before it connects
// anywhere, naming the flag (exit 2).
func TestServeRefusals(t *testing.T) {
	dir := t.TempDir()
	open := filepath.Join(dir, "keys-open")
	if err := os.WriteFile(open, []byte("k1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "keys-empty")
	if err := os.WriteFile(empty, []byte("# none\n\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--listen", "10.1.2.3:8000"}, "listen: 10.1.2.3:8000 is reachable beyond this host: requests need API keys and TLS (give --api-key-file; or --insecure to accept the risk)"},
		{[]string{"serve", "--listen", "example.com:8000"}, "listen: \"example.com\": give an IP address"},
		{[]string{"serve", "--api-key-file", open}, "api-key-file: "},
		{[]string{"serve", "--api-key-file", empty}, "holds no key"},
		{[]string{"serve", "--tls-cert", "/x.pem"}, "tls-cert: TLS needs both"},
		{[]string{"serve", "--tokenizer", filepath.Join(dir, "nothing")}, "tokenizer: "},
		{[]string{"serve", "--request-timeout", "0s"}, "request-timeout: must be > 0"},
		{[]string{"serve", "--body-timeout", "0s"}, "body-timeout: must be > 0"},
		{[]string{"launch", "--http", "0", "--body-timeout", "-1s"}, "body-timeout: must be > 0"},
		{[]string{"serve", "--log-format", "xml"}, "log-format:"},
		{[]string{"launch", "--http", "10.1.2.3:8000"}, "http: 10.1.2.3:8000 is reachable beyond this host"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(c.args, &stdout, &stderr); code != exitConfig || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d naming %q", c.args, code, stderr.String(), exitConfig, c.want)
		}
	}
	// The bound's environment variable, as every flag has one.
	t.Setenv("TPC_BODY_TIMEOUT", "0s")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"serve"}, &stdout, &stderr); code != exitConfig || !strings.Contains(stderr.String(), "body-timeout: must be > 0") {
		t.Errorf("TPC_BODY_TIMEOUT=0s: exit %d, stderr %q", code, stderr.String())
	}
}

// A Hugging Face hub ID as --tokenizer is refused with one "tokenizer:"
// (the flag), the hint that only local files are read, and how to get them.
func TestServeTokenizerHubID(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run([]string{"serve", "--tokenizer", "meta-llama/Llama-3.1-8B"}, &stdout, &stderr)
	msg := stderr.String()
	if code != exitConfig || strings.Count(msg, "tokenizer:") != 1 || !strings.Contains(msg, "looks like a Hugging Face hub ID") ||
		!strings.Contains(msg, "nothing is downloaded") {
		t.Errorf("exit %d, stderr %q; want exit %d, one tokenizer: prefix and the hub hint", code, msg, exitConfig)
	}
}

// launch refuses to start a job its gateway's tokenizer does not fit (more
// ids than --vocab), with the reason /ready would give, instead of serving
// requests that the gateway would refuse.
func TestLaunchRefusesTokenizerLargerThanVocab(t *testing.T) {
	tok := filepath.Join("..", "..", "e2e", "testdata", "tokenizer")
	var stdout, stderr bytes.Buffer
	code := run([]string{"launch", "--http", "0", "--tokenizer", tok, "--vocab", "100", "--nproc", "1"}, &stdout, &stderr)
	want := "tokenizer: the tokenizer " + tok + " has 505 tokens, more than the job's vocabulary of 100 (--vocab 100)"
	if code != exitConfig || !strings.Contains(stderr.String(), want) {
		t.Errorf("exit %d, stderr %q; want exit %d and %q", code, stderr.String(), exitConfig, want)
	}
}
