package e2e

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

func validWorkerOptions() Options {
	return Options{Self: "/bin/tpcoord", NProc: 2, Batch: 2, Vocab: 512, Tokens: 4, Combos: []string{"all"},
		Timeout: time.Minute, Executor: WorkerExecutor, Temperature: 0.8,
		Model: Model{WorkerCmd: "python3 worker.py --socket {socket} --model /m", EOS: 2, ForwardTimeout: time.Minute}}
}

func TestOptionsValidateWorker(t *testing.T) {
	if err := validWorkerOptions().Validate(); err != nil {
		t.Fatalf("valid worker options: %v", err)
	}
	for _, tc := range []struct {
		edit func(*Options)
		flag string
	}{
		{func(o *Options) { o.Executor = "card" }, "--executor"},
		{func(o *Options) { o.Model.WorkerCmd = "" }, "--worker-cmd"},
		{func(o *Options) { o.Model.WorkerCmd = `python3 "worker.py` }, "--worker-cmd"},
		{func(o *Options) { o.Model.EOS = -2 }, "--eos"},
		{func(o *Options) { o.Model.EOS = 512 }, "--eos"},
		{func(o *Options) { o.Model.ForwardTimeout = 0 }, "--forward-timeout"},
		{func(o *Options) { o.Temperature = -1 }, "--temperature"},
		{func(o *Options) { o.Temperature = float32(math.Inf(1)) }, "--temperature"},
		{func(o *Options) { o.Temperature = float32(math.NaN()) }, "--temperature"},
		{func(o *Options) { o.Executor = SyntheticExecutor }, "--worker-cmd"}, // a worker command without the worker
	} {
		o := validWorkerOptions()
		tc.edit(&o)
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("%+v: error %v, want one naming %s", o, err, tc.flag)
		}
	}
	o := validWorkerOptions()
	o.Temperature, o.Model.EOS = 0, -1 // greedy, no EOS
	if err := o.Validate(); err != nil {
		t.Errorf("greedy without EOS: %v", err)
	}
}

// flagValue is the value after flag in args, and whether it is there.
func flagValue(args []string, flag string) (string, bool) {
	i := slices.Index(args, flag)
	if i < 0 || i+1 >= len(args) {
		return "", false
	}
	return args[i+1], true
}

// The worker's flags reach launch as given; the synthetic forward time
// does not. The synthetic executor gets its forward time and nothing of
// the worker's.
func TestExecutorArgs(t *testing.T) {
	o := validWorkerOptions()
	o.ForwardTime = 7 * time.Millisecond
	args := o.executorArgs()
	for flag, want := range map[string]string{
		"--executor": "worker", "--worker-cmd": o.Model.WorkerCmd, "--eos": "2", "--forward-timeout": "1m0s",
	} {
		if got, ok := flagValue(args, flag); !ok || got != want {
			t.Errorf("%s: got %q (present %v), want %q in %q", flag, got, ok, want, args)
		}
	}
	if _, ok := flagValue(args, "--forward-time"); ok {
		t.Errorf("--forward-time passed to a worker job: %q", args)
	}
	o.Executor = SyntheticExecutor
	args = o.executorArgs()
	if got, ok := flagValue(args, "--forward-time"); !ok || got != "7ms" || len(args) != 2 {
		t.Errorf("synthetic: %q, want only --forward-time 7ms", args)
	}
}
