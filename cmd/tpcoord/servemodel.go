//go:build !agentonly

package main

import (
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tpcoord/tpcoord/coordinator/launch"
	"github.com/tpcoord/tpcoord/internal/modeldir"
)

// serveModelOptions are serve-model's flags, besides launch's.
type serveModelOptions struct {
	launch       launchOptions
	tp           int
	python       string
	workerScript string
	kvCacheGiB   float64
	host         string
	port         int
}

// serveModelOwnFlags are serve-model's flags that are not launch's.
var serveModelOwnFlags = []string{"tensor-parallel-size", "python", "worker-script", "kv-cache-gib", "host", "port"}

// serveModelDecides are launch's flags serve-model sets from the model
// directory and its own flags: hidden, and refused when given.
var serveModelDecides = map[string]string{
	"nproc":           "--tensor-parallel-size (-tp) sets it",
	"executor":        "serve-model runs the PyTorch worker",
	"worker-cmd":      "serve-model starts the PyTorch worker (see --worker-script, --python, --kv-cache-gib)",
	"worker-socket":   "serve-model starts the PyTorch worker",
	"vocab":           "serve-model reads vocab_size from the model directory's config.json",
	"eos":             "serve-model reads eos_token_id from the model directory's generation_config.json or config.json",
	"http":            "--host and --port set it",
	"tokenizer":       "serve-model uses the model directory's tokenizer.json",
	"demo":            "serve-model serves the API (launch --demo runs the demo)",
	"demo-requests":   "serve-model serves the API",
	"demo-max-tokens": "serve-model serves the API",
}

func newServeModelCmd() *cobra.Command { return serveModelCmd(&serveModelOptions{}) }

// serveModelCmd is serve-model's command, its flags bound to o.
func serveModelCmd(o *serveModelOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve-model DIR [-tp N] [--port PORT]",
		Short: "Serve a Hugging Face Llama/Granite model directory over the OpenAI-compatible API, tensor-parallel, in one command",
		Long: `Serve the Hugging Face checkpoint in DIR as vLLM's 'vllm serve DIR
--tensor-parallel-size N' does: an OpenAI-compatible API on --host:--port
(default 127.0.0.1:8000) that takes and returns text. It is named
serve-model because 'tpcoord serve' is the gateway alone, for a job
that runs elsewhere.

serve-model reads DIR: config.json's vocab_size, eos_token_id (the first of
a list) and max_position_embeddings; generation_config.json, if present,
whose eos_token_id overrides config.json's (its temperature, top_p and
other sampling defaults are not applied: a request's own fields, else the
API's defaults, apply); tokenizer.json, and tokenizer_config.json beside
it for the chat template. Then it runs 'tpcoord launch' with --nproc N,
--executor worker and, for each rank, the PyTorch worker:
  PYTHON WORKER-SCRIPT --socket {socket} --model DIR [--kv-cache-gib G]
--http HOST:PORT, --tokenizer DIR/tokenizer.json and --max-model-len from
max_position_embeddings (unless given). The model is listed in /v1/models
under DIR's base name unless --served-model-name is given.

The worker script, unless --worker-script names it, is the first found of:
BIN/../share/tpcoord/torch-worker/worker.py (BIN: this binary's directory;
where packages install it), BIN/examples/torch-worker/worker.py and
BIN/../examples/torch-worker/worker.py (a binary built in a checkout),
./examples/torch-worker/worker.py (go run from a checkout's root), and
/usr/share/tpcoord/torch-worker/worker.py.

-tp N is accepted for --tensor-parallel-size N, as vLLM writes it. Every
other flag of launch works as it does there (--max-batch, --api-key-file,
--ready-file, --metrics-addr, ...); SIGINT/SIGTERM stop the ranks and the
workers. See docs/operations.md.`,
		Example: `  tpcoord serve-model /tmp/tiny-llama -tp 2
  tpcoord serve-model /models/granite-3b --tensor-parallel-size 4 --port 8080 --kv-cache-gib 4`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return configError("serve-model takes one argument, the model directory (tpcoord serve-model DIR), not %d", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return runServeModel(cmd, o, args[0])
		},
	}
	o.flags(cmd.Flags())
	return cmd
}

func (o *serveModelOptions) flags(fs *pflag.FlagSet) {
	o.launch.flags(fs)
	o.launch.ownFlags = serveModelOwnFlags
	groupRest(fs, groupLaunch) // serve-model's own flags come first in help
	for name := range serveModelDecides {
		hide(fs, name)
	}
	fs.Lookup("served-model-name").Usage = "model name /v1/models lists and requests must give (default: DIR's base name)"
	fs.IntVar(&o.tp, "tensor-parallel-size", 1, "number of ranks the model is split across (-tp N is accepted too, as vLLM's)")
	fs.StringVar(&o.python, "python", "/usr/bin/python3", "the Python, with PyTorch, that runs the worker")
	fs.StringVar(&o.workerScript, "worker-script", "", "the PyTorch worker's worker.py (default: the first found; see above)")
	fs.Float64Var(&o.kvCacheGiB, "kv-cache-gib", 0, "each rank's KV cache, GiB, passed to the worker (0: the worker's default, 1 GiB)")
	fs.StringVar(&o.host, "host", "127.0.0.1", "address the API listens on (beyond loopback it needs --api-key-file and --tls-cert, or --insecure)")
	fs.IntVar(&o.port, "port", 8000, "port the API listens on")
}

// runServeModel reads the model directory, sets launch's flags from it and
// runs launch.
func runServeModel(cmd *cobra.Command, o *serveModelOptions, dir string) error {
	fs := cmd.Flags()
	if err := layerConfigQuiet(fs); err != nil {
		return err
	}
	for name, why := range serveModelDecides {
		if given(fs, name) {
			return configError("%s: not a serve-model flag: %s", name, why)
		}
	}
	if err := o.check(); err != nil {
		return err
	}
	m, err := modeldir.Read(dir)
	if err != nil {
		return configError("%v", err)
	}
	set, err := o.launchFlags(fs, m)
	if err != nil {
		return err
	}
	for _, kv := range set {
		if err := fs.Set(kv[0], kv[1]); err != nil {
			return configError("%s: %v", kv[0], err)
		}
	}
	return runLaunchCmd(cmd, &o.launch)
}

// check checks serve-model's own flags.
func (o *serveModelOptions) check() error {
	switch {
	case o.tp < 1:
		return configError("tensor-parallel-size: %d, want at least 1", o.tp)
	case o.kvCacheGiB < 0 || math.IsNaN(o.kvCacheGiB) || math.IsInf(o.kvCacheGiB, 0):
		return configError("kv-cache-gib: %g, want a positive size (0: the worker's default)", o.kvCacheGiB)
	case o.port < 0 || o.port > 65535:
		return configError("port: %d is not a TCP port", o.port)
	}
	return nil
}

// launchFlags are the launch flags, name and value, that serve the model m.
func (o *serveModelOptions) launchFlags(fs *pflag.FlagSet, m *modeldir.Model) ([][2]string, error) {
	workerCmd, err := o.workerCmd(m)
	if err != nil {
		return nil, err
	}
	set := [][2]string{
		{"nproc", strconv.Itoa(o.tp)},
		{"executor", "worker"},
		{"worker-cmd", workerCmd},
		{"vocab", strconv.Itoa(m.Vocab)},
		{"eos", strconv.Itoa(m.EOS)},
		{"http", net.JoinHostPort(o.host, strconv.Itoa(o.port))},
		{"tokenizer", m.Tokenizer},
	}
	if !given(fs, "served-model-name") {
		set = append(set, [2]string{"served-model-name", m.Name})
	}
	if !given(fs, "max-model-len") && m.MaxModelLen > 0 {
		set = append(set, [2]string{"max-model-len", strconv.Itoa(m.MaxModelLen)})
	}
	return set, nil
}

// workerCmd is each rank's --worker-cmd: the PyTorch worker on m.
func (o *serveModelOptions) workerCmd(m *modeldir.Model) (string, error) {
	script, err := o.script()
	if err != nil {
		return "", err
	}
	args := []string{o.python, script, "--socket", "{socket}", "--model", m.Dir}
	if o.kvCacheGiB > 0 {
		args = append(args, "--kv-cache-gib", strconv.FormatFloat(o.kvCacheGiB, 'g', -1, 64))
	}
	for i, a := range args {
		args[i] = shellQuote(a)
	}
	return strings.Join(args, " "), nil
}

// script is --worker-script, else the first of launch.TorchWorkerPlaces
// that holds the script.
func (o *serveModelOptions) script() (string, error) {
	if o.workerScript != "" {
		if _, err := os.Stat(o.workerScript); err != nil {
			return "", configError("worker-script: %v", err)
		}
		return filepath.Abs(o.workerScript)
	}
	self, err := os.Executable()
	if err == nil {
		self, err = filepath.EvalSymlinks(self)
	}
	if err != nil {
		return "", fmt.Errorf("locate own binary: %w", err)
	}
	cwd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("working directory: %w", err)
	}
	script, err := launch.TorchWorkerScript(self, cwd)
	if err != nil {
		return "", configError("worker-script: %v; name it with --worker-script", err)
	}
	return script, nil
}

// given reports whether the flag name was set: on the command line, in
// the environment or in the --config file.
func given(fs *pflag.FlagSet, name string) bool {
	f := fs.Lookup(name)
	return f.Changed || f.Value.String() != f.DefValue
}

// shellQuote quotes s for --worker-cmd's splitting (worker.SplitCommand)
// if it holds anything but letters, digits and -_./:=,+@{}.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=,+@{}") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
