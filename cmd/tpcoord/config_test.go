package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func TestLayerConfigPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "agent.yaml")
	if err := os.WriteFile(file, []byte("job: from-file\nrank: 3\nworld-size: 8\nmax_batch: 7\njoin: [a:1, b:2]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TPC_RANK", "2")
	t.Setenv("TPC_WORLD_SIZE", "6")

	var cfg agentConfig
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
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			var cfg agentConfig
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
		{[]string{"agent", "--eos", "100352"}, "eos:"},
		{[]string{"agent", "--log-format", "xml"}, "log-format:"},
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
	if code := run([]string{"version"}, &stdout, &stderr); code != 0 || !strings.HasPrefix(stdout.String(), "tpcoord ") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
}
