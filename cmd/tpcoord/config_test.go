//go:build !agentonly

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/internal/buildinfo"
	"github.com/tpcoord/tpcoord/noisepool"
	"github.com/tpcoord/tpcoord/rank"
)

func TestLayerConfigPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "agent.yaml")
	if err := os.WriteFile(file, []byte("job: from-file\nrank: 3\nworld-size: 8\nmax_batch: 7\njoin: [a:1, b:2]\nnoise-form: bound\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TPC_RANK", "2")
	t.Setenv("TPC_WORLD_SIZE", "6")

	var cfg agentOptions
	fs := pflag.NewFlagSet("agent", pflag.ContinueOnError)
	cfg.flags(fs)
	if err := fs.Parse([]string{"--config", file, "--world-size", "4"}); err != nil {
		t.Fatal(err)
	}
	if err := layerConfig(fs); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"world-size: flag beats env and file", cfg.WorldSize, 4},
		{"rank: env beats file", cfg.Rank, 2},
		{"job: file beats default", cfg.Job, "from-file"},
		{"max-batch: underscore key in file", cfg.MaxBatch, 7},
		{"join: YAML list", strings.Join(cfg.Join, ","), "a:1,b:2"},
		{"vocab: default", cfg.Vocab, 100352},
		{"noise-form: a typed value from the file", cfg.NoisePool.Form, noisepool.FormBound},
		{"noise-producers: auto by default", cfg.NoisePool.Producers, noisepool.AutoProducers},
		{"noise-step: default", cfg.NoisePool.Step, 20 * time.Millisecond},
	} {
		if c.got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, c.got, c.want)
		}
	}
}

func TestLayerConfigErrorsNameTheField(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("job: x\nwrold-size: 4\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"unknown file key", nil, []string{"--config", bad}, "wrold-size"},
		{"missing file", nil, []string{"--config", filepath.Join(dir, "nope.yaml")}, "config:"},
		{"bad env value", map[string]string{"TPC_MAX_BATCH": "many"}, nil, "TPC_MAX_BATCH"},
		{"bad byte budget", map[string]string{"TPC_STEP_QUEUE_BYTES": "64MiB"}, nil, "TPC_STEP_QUEUE_BYTES"},
		{"bad noise form", map[string]string{"TPC_NOISE_FORM": "gumbel"}, nil, "TPC_NOISE_FORM"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			var cfg agentOptions
			fs := pflag.NewFlagSet("agent", pflag.ContinueOnError)
			cfg.flags(fs)
			if err := fs.Parse(c.args); err != nil {
				t.Fatal(err)
			}
			err := layerConfig(fs)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one naming %q", err, c.want)
			}
		})
	}
}

func TestAgentConfigErrorsExitTwoNamingTheFlag(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"agent", "--rank", "5", "--world-size", "2", "--join", "x:1"}, "rank: must be in [0, 2)"},
		{[]string{"agent", "--world-size", "0"}, "world-size:"},
		{[]string{"agent", "--executor", "gpu"}, "executor:"},
		{[]string{"agent", "--job", "a.b"}, "job:"},
		{[]string{"agent", "--rank", "1", "--world-size", "2"}, "join:"},
		{[]string{"agent", "--rank", "1", "--world-size", "2", "--join", "x:1", "--nats-serve"}, "nats-serve: only rank 0"},
		{[]string{"agent", "--nats-serve", "--on-peer-loss", "wait"}, "nats-serve: not with on-peer-loss wait"},
		{[]string{"launch", "--nats-serve"}, "nats-serve: launch decides"},
		{[]string{"launch", "--job-key-file", "/etc/tpcoord/job.key"}, "job-key-file: launch makes a new key"},
		{[]string{"launch", "--nats-in-rank0", "--nats", "nats://127.0.0.1:4222"}, "nats-in-rank0: not with a NATS server"},
		{[]string{"agent", "--eos", "100352"}, "eos:"},
		{[]string{"agent", "--log-format", "xml"}, `log-format: "xml" is not one of auto, text, json`},
		{[]string{"worker", "--socket", "/nonexistent/w.sock", "--log-format", "xml"}, `log-format: "xml" is not one of auto, text, json`},
		{[]string{"launch", "--log-format", "xml"}, `log-format: "xml" is not one of auto, text, json`},
		{[]string{"agent", "--replay-window-bytes", "0"}, "replay-window-bytes: must be > 0"},
		{[]string{"agent", "--step-queue-bytes", "-1"}, "step-queue-bytes: must be > 0"},
		{[]string{"agent", "--liveness-grace", "0s"}, "liveness-grace: must be > 0"},
		{[]string{"agent", "--client-timeout", "100ms"}, "client-timeout: must be longer than the clients' keepalive interval"},
		{[]string{"agent", "--replay-timeout", "0s"}, "replay-timeout: must be > 0"},
		{[]string{"agent", "--sampling-ranks", "some"}, `sampling-ranks: "some" is not one of rank0, all`},
		{[]string{"launch", "--nproc", "0"}, "nproc:"},
		{[]string{"agent", "--no-such-flag"}, "unknown flag"},
	}
	for _, c := range cases {
		var stdout, stderr bytes.Buffer
		code := run(c.args, &stdout, &stderr)
		if code != exitConfig || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d naming %q", c.args, code, stderr.String(), exitConfig, c.want)
		}
	}
}

func TestVersion(t *testing.T) {
	var stdout, stderr bytes.Buffer
	want := fmt.Sprintf("tpcoord %s, wire protocol %d\n", buildinfo.Get(), broadcast.Version)
	if code := run([]string{"version"}, &stdout, &stderr); code != 0 || stdout.String() != want {
		t.Fatalf("exit %d, stdout %q, stderr %q; want stdout %q", code, stdout.String(), stderr.String(), want)
	}
	stdout.Reset()
	if code := run([]string{"version", "--json"}, &stdout, &stderr); code != 0 {
		t.Fatalf("version --json: exit %d, stderr %q", code, stderr.String())
	}
	var got struct {
		buildinfo.Info
		WireProtocol int `json:"wire_protocol"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &got); err != nil || got.Info != buildinfo.Get() || got.WireProtocol != broadcast.Version {
		t.Fatalf("version --json: %v, got %+v from %q", err, got, stdout.String())
	}
}

// TestByteBudgetFlags: the replay window's and the step queue's byte
// budgets default to rank's defaults and layer like every other flag;
// the example config sets them.
func TestByteBudgetFlags(t *testing.T) {
	parse := func(t *testing.T, args ...string) agentOptions {
		t.Helper()
		var cfg agentOptions
		fs := pflag.NewFlagSet("agent", pflag.ContinueOnError)
		cfg.flags(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		if err := layerConfig(fs); err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	t.Run("defaults", func(t *testing.T) {
		cfg := parse(t)
		if cfg.ReplayWindowBytes != rank.DefaultReplayWindowBytes || cfg.StepQueueBytes != rank.DefaultStepQueueBytes || rank.DefaultReplayWindowBytes != 64<<20 {
			t.Fatalf("replay-window-bytes %d, step-queue-bytes %d; want 64 MiB each", cfg.ReplayWindowBytes, cfg.StepQueueBytes)
		}
	})
	t.Run("layers", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "agent.yaml")
		if err := os.WriteFile(file, []byte("replay_window_bytes: 1000\nstep-queue-bytes: 2000\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Setenv("TPC_STEP_QUEUE_BYTES", "3000")
		cfg := parse(t, "--config", file)
		if cfg.ReplayWindowBytes != 1000 || cfg.StepQueueBytes != 3000 {
			t.Fatalf("replay-window-bytes %d (file: 1000), step-queue-bytes %d (env: 3000)", cfg.ReplayWindowBytes, cfg.StepQueueBytes)
		}
		cfg = parse(t, "--config", file, "--step-queue-bytes", "4000")
		if cfg.StepQueueBytes != 4000 {
			t.Fatalf("step-queue-bytes %d, want the flag's 4000", cfg.StepQueueBytes)
		}
	})
	t.Run("example config", func(t *testing.T) {
		cfg := parse(t, "--config", filepath.Join("..", "..", "configs", "agent.example.yaml"))
		if cfg.ReplayWindowBytes != 64<<20 || cfg.StepQueueBytes != 64<<20 {
			t.Fatalf("example config: replay-window-bytes %d, step-queue-bytes %d", cfg.ReplayWindowBytes, cfg.StepQueueBytes)
		}
	})
}

// TestLogFormatLayers: --log-format defaults to auto and layers like every
// other flag (file, TPC_LOG_FORMAT, flag); the example config sets json.
func TestLogFormatLayers(t *testing.T) {
	parse := func(t *testing.T, args ...string) agentOptions {
		t.Helper()
		var cfg agentOptions
		fs := pflag.NewFlagSet("agent", pflag.ContinueOnError)
		cfg.flags(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		if err := layerConfig(fs); err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	if got := parse(t).LogFormat; got != "auto" {
		t.Errorf("default log-format %q, want auto", got)
	}
	if got := parse(t, "--config", filepath.Join("..", "..", "configs", "agent.example.yaml")).LogFormat; got != "json" {
		t.Errorf("example config: log-format %q, want json", got)
	}
	file := filepath.Join(t.TempDir(), "agent.yaml")
	if err := os.WriteFile(file, []byte("log-format: text\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := parse(t, "--config", file).LogFormat; got != "text" {
		t.Errorf("file: log-format %q, want text", got)
	}
	t.Setenv("TPC_LOG_FORMAT", "json")
	if got := parse(t, "--config", file).LogFormat; got != "json" {
		t.Errorf("env over file: log-format %q, want json", got)
	}
	if got := parse(t, "--config", file, "--log-format", "auto").LogFormat; got != "auto" {
		t.Errorf("flag over env: log-format %q, want auto", got)
	}
}

// writeKeyFile writes content to dir/name with exactly mode, whatever the
// umask, and returns its path.
func writeKeyFile(t *testing.T, dir, name, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestJobKeyFileErrors: a job key file that is open to others, holds a key
// of another length or no base64, or is missing stops the agent at once
// with exit 2, naming the flag and the file, whether the flag or
// TPC_JOB_KEY_FILE gives it.
func TestJobKeyFileErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string { return writeKeyFile(t, dir, name, content, mode) }
	key := "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n" // 32 bytes
	for _, c := range []struct {
		name, file, want string
		env              bool
	}{
		{"readable by others", write("open.key", key, 0o644), "chmod 600", false},
		{"readable by the group, from the environment", write("group.key", key, 0o640), "chmod 600", true},
		{"16 bytes", write("short.key", "AAECAwQFBgcICQoLDA0ODw==\n", 0o600), "holds 16 bytes, want 32", false},
		{"not base64", write("text.key", "secret\n", 0o600), "not base64", false},
		{"missing", filepath.Join(dir, "missing.key"), "no such file", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := []string{"agent", "--job-key-file", c.file}
			if c.env {
				t.Setenv("TPC_JOB_KEY_FILE", c.file)
				args = []string{"agent"}
			}
			var stdout, stderr bytes.Buffer
			code := run(args, &stdout, &stderr)
			out := stderr.String()
			if code != exitConfig || !strings.Contains(out, "job-key-file: ") || !strings.Contains(out, c.file) || !strings.Contains(out, c.want) {
				t.Fatalf("exit %d, stderr %q; want exit %d naming job-key-file, %s and %q", code, out, exitConfig, c.file, c.want)
			}
			if strings.Contains(out, strings.TrimSpace(key)) {
				t.Fatalf("the key was printed: %q", out)
			}
		})
	}
}

// TestGossipKeyFileErrors: a gossip keyring file open to others, with a
// bad line, or missing stops agent and launch at once with exit 2, naming
// the flag, the file (and the line), whether the flag or
// TPC_GOSSIP_KEY_FILE gives it.
func TestGossipKeyFileErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string { return writeKeyFile(t, dir, name, content, mode) }
	key := "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n" // 32 bytes
	for _, c := range []struct {
		name, file, want string
		env              bool
	}{
		{"readable by others", write("open.key", key, 0o644), "chmod 600", false},
		{"readable by the group, from the environment", write("group.key", key, 0o640), "chmod 600", true},
		{"20 bytes on line 2", write("short.key", key+"AAECAwQFBgcICQoLDA0ODxAREhM=\n", 0o600), "line 2: holds 20 bytes", false},
		{"missing", filepath.Join(dir, "missing.key"), "no such file", false},
	} {
		for _, cmd := range []string{"agent", "launch"} {
			t.Run(cmd+" "+c.name, func(t *testing.T) {
				args := []string{cmd, "--gossip-key-file", c.file}
				if c.env {
					t.Setenv("TPC_GOSSIP_KEY_FILE", c.file)
					args = []string{cmd}
				}
				var stdout, stderr bytes.Buffer
				code := run(args, &stdout, &stderr)
				out := stderr.String()
				if code != exitConfig || !strings.Contains(out, "gossip-key-file: ") || !strings.Contains(out, c.file) || !strings.Contains(out, c.want) {
					t.Fatalf("exit %d, stderr %q; want exit %d naming gossip-key-file, %s and %q", code, out, exitConfig, c.file, c.want)
				}
				if strings.Contains(out, strings.TrimSpace(key)) {
					t.Fatalf("the key was printed: %q", out)
				}
			})
		}
	}
}

// TestInsecureRefusals: memberlist beyond loopback without a gossip key,
// and a NATS server beyond loopback without credentials, exit 2 naming the
// flag, what is open, the flags that would fix it and --insecure; never a
// password. launch binds its ranks on loopback itself, but refuses the same
// NATS servers.
func TestInsecureRefusals(t *testing.T) {
	gossip := []string{"unencrypted", "(give --gossip-key-file; or --insecure to accept the risk)"}
	nats := []string{"not on loopback, and this rank would connect without credentials",
		"(give --nats-user, --nats-creds, --nats-nkey-seed or --nats-tls-cert; or --insecure to accept the risk)"}
	for _, c := range []struct {
		args []string
		env  string // TPC_BIND, if set
		want []string
	}{
		{[]string{"agent", "--bind", "192.0.2.1:7946"}, "", append([]string{"bind: 192.0.2.1:7946 is not a loopback address"}, gossip...)},
		{[]string{"agent", "--bind", "0.0.0.0:7946"}, "", append([]string{"bind: 0.0.0.0:7946 is not a loopback"}, gossip...)},
		{[]string{"agent"}, "[::]:7946", append([]string{"bind: [::]:7946 is not a loopback"}, gossip...)},
		{[]string{"agent", "--bind", "tpc-node-a:7946", "--insecure"}, "", []string{`bind: "tpc-node-a:7946": memberlist binds an IP address, not a name`}},
		{[]string{"agent", "--bind", "localhost:7946"}, "", []string{`bind: "localhost:7946": memberlist binds an IP address`}},
		{[]string{"agent", "--nats", "nats://u:s3cret@192.0.2.1:4222,nats://192.0.2.2:4222"}, "", append([]string{"nats: nats://192.0.2.2:4222: not on loopback"}, nats...)},
		{[]string{"launch", "--nats", "nats://nats.example:4222"}, "", append([]string{"nats: nats://nats.example:4222: not on loopback"}, nats...)},
		{[]string{"agent", "--bind", "7946"}, "", []string{`bind: "7946" is not host:port`}},
	} {
		t.Run(strings.Join(c.args, " ")+" "+c.env, func(t *testing.T) {
			if c.env != "" {
				t.Setenv("TPC_BIND", c.env)
			}
			var stdout, stderr bytes.Buffer
			code := run(c.args, &stdout, &stderr)
			out := stderr.String()
			for _, w := range c.want {
				if code != exitConfig || !strings.Contains(out, w) {
					t.Errorf("exit %d, stderr %q; want exit %d saying %q", code, out, exitConfig, w)
				}
			}
			if strings.Contains(out, "s3cret") {
				t.Errorf("the password was printed: %q", out)
			}
		})
	}
}
