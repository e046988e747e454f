//go:build !agentonly

package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tpcoord/tpcoord/internal/modeldir"
	"github.com/tpcoord/tpcoord/rank/worker"
)

// modelDir writes a minimal model directory named "my model" (a blank, to
// be quoted in the worker's command) and a worker script beside it.
func modelDir(t *testing.T) (dir, script string) {
	t.Helper()
	root := t.TempDir()
	dir = filepath.Join(root, "my model")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{
		"config.json":    `{"vocab_size": 1000, "eos_token_id": [2, 3], "max_position_embeddings": 4096}`,
		"tokenizer.json": `{}`,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	script = filepath.Join(root, "worker.py")
	if err := os.WriteFile(script, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, script
}

// launchFlagsFor parses args as serve-model's and returns the launch
// flags it sets to serve dir.
func launchFlagsFor(t *testing.T, dir string, args ...string) map[string]string {
	t.Helper()
	var o serveModelOptions
	fs := serveModelCmd(&o).Flags()
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	m, err := modeldir.Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	set, err := o.launchFlags(fs, m)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, kv := range set {
		got[kv[0]] = kv[1]
	}
	return got
}

func checkFlags(t *testing.T, got, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got[k] != v {
			t.Errorf("--%s=%q, want %q", k, got[k], v)
		}
	}
}

func TestServeModelLaunchFlags(t *testing.T) {
	dir, script := modelDir(t)
	got := launchFlagsFor(t, dir, "--tensor-parallel-size", "2", "--worker-script", script, "--kv-cache-gib", "0.5",
		"--port", "9000", "--python", "/opt/py 3/bin/python")
	checkFlags(t, got, map[string]string{"nproc": "2", "executor": "worker", "vocab": "1000", "eos": "2", "http": "127.0.0.1:9000",
		"tokenizer": filepath.Join(dir, "tokenizer.json"), "served-model-name": "my model", "max-model-len": "4096"})
	argv, err := worker.SplitCommand(got["worker-cmd"])
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/opt/py 3/bin/python", script, "--socket", "{socket}", "--model", dir, "--kv-cache-gib", "0.5"}
	if !slices.Equal(argv, want) {
		t.Errorf("worker-cmd %s splits to %q, want %q", got["worker-cmd"], argv, want)
	}
}

// TestServeModelDefaults: one rank on 127.0.0.1:8000, the worker's own KV
// cache size; a name or a context given is kept; IPv6 hosts are bracketed.
func TestServeModelDefaults(t *testing.T) {
	dir, script := modelDir(t)
	got := launchFlagsFor(t, dir, "--worker-script", script)
	checkFlags(t, got, map[string]string{"nproc": "1", "http": "127.0.0.1:8000", "served-model-name": "my model"})
	if strings.Contains(got["worker-cmd"], "--kv-cache-gib") || !strings.HasPrefix(got["worker-cmd"], "/usr/bin/python3 ") {
		t.Errorf("worker-cmd %s: want /usr/bin/python3 and no --kv-cache-gib", got["worker-cmd"])
	}
	got = launchFlagsFor(t, dir, "--worker-script", script, "--served-model-name", "tiny", "--max-model-len", "128", "--host", "::1")
	if _, ok := got["served-model-name"]; ok {
		t.Errorf("--served-model-name given, yet set to %q", got["served-model-name"])
	}
	if _, ok := got["max-model-len"]; ok {
		t.Errorf("--max-model-len given, yet set to %q", got["max-model-len"])
	}
	checkFlags(t, got, map[string]string{"http": "[::1]:8000"})
}

func TestShellQuote(t *testing.T) {
	for _, s := range []string{"plain/path.py", "with blank", "it's", `back\slash "quoted"`, ""} {
		argv, err := worker.SplitCommand("x " + shellQuote(s))
		if err != nil || len(argv) != 2 || argv[1] != s {
			t.Errorf("%q quoted %s splits to %q, %v", s, shellQuote(s), argv, err)
		}
	}
}

// TestServeModelRefusals: the flags serve-model decides, and bad values of
// its own, exit 2 naming the flag before anything starts.
func TestServeModelRefusals(t *testing.T) {
	dir, script := modelDir(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--vocab", "5"}, "vocab: not a serve-model flag: serve-model reads vocab_size"},
		{[]string{"--nproc", "2"}, "nproc: not a serve-model flag: --tensor-parallel-size (-tp) sets it"},
		{[]string{"--worker-cmd", "x"}, "worker-cmd: not a serve-model flag"},
		{[]string{"--http", ":1"}, "http: not a serve-model flag: --host and --port set it"},
		{[]string{"-tp", "0"}, "tensor-parallel-size: 0, want at least 1"},
		{[]string{"--port", "70000"}, "port: 70000 is not a TCP port"},
		{[]string{"--kv-cache-gib", "-1"}, "kv-cache-gib: -1"},
		{[]string{"--worker-script", filepath.Join(dir, "absent.py")}, "worker-script:"},
	} {
		var out, errOut strings.Builder
		args := append([]string{"serve-model", dir, "--worker-script", script}, c.args...)
		if code := run(args, &out, &errOut); code != exitConfig || !strings.Contains(errOut.String(), c.want) {
			t.Errorf("%q: exit %d, %q; want exit 2 saying %q", c.args, code, errOut.String(), c.want)
		}
	}
	t.Setenv("TPC_EOS", "7")
	var out, errOut strings.Builder
	if code := run([]string{"serve-model", dir, "--worker-script", script}, &out, &errOut); code != exitConfig || !strings.Contains(errOut.String(), "eos: not a serve-model flag") {
		t.Errorf("TPC_EOS set: exit %d, %q", code, errOut.String())
	}
}

func TestServeModelBadDir(t *testing.T) {
	dir, script := modelDir(t)
	if err := os.Remove(filepath.Join(dir, "tokenizer.json")); err != nil {
		t.Fatal(err)
	}
	var out, errOut strings.Builder
	code := run([]string{"serve-model", dir, "--worker-script", script}, &out, &errOut)
	if code != exitConfig || !strings.Contains(errOut.String(), filepath.Join(dir, "tokenizer.json")+": missing") {
		t.Errorf("no tokenizer.json: exit %d, %q", code, errOut.String())
	}
}

// TestServeModelTPFlag: -tp reaches --tensor-parallel-size through the
// root command (a missing model directory then fails, exit 2, after the
// flags parsed); without the rewrite, cobra would refuse -tp.
func TestServeModelTPFlag(t *testing.T) {
	for _, args := range [][]string{
		{"serve-model", "/nonexistent/model", "-tp", "2"},
		{"serve-model", "-tp=2", "/nonexistent/model"},
	} {
		var out, errOut strings.Builder
		code := run(args, &out, &errOut)
		if code != exitConfig || !strings.Contains(errOut.String(), "model directory") {
			t.Errorf("%q: exit %d, %s", args, code, errOut.String())
		}
	}
}

func TestServeModelNeedsOneDir(t *testing.T) {
	for _, args := range [][]string{{"serve-model"}, {"serve-model", "a", "b"}} {
		var out, errOut strings.Builder
		if code := run(args, &out, &errOut); code != exitConfig || !strings.Contains(errOut.String(), "the model directory") {
			t.Errorf("%q: exit %d, %q", args, code, errOut.String())
		}
	}
}
