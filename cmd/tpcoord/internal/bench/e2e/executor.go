package e2e

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/tpcoord/tpcoord/rank/worker"
)

// Executors bench e2e runs on: launch's --executor values.
const (
	SyntheticExecutor = "synthetic"
	WorkerExecutor    = "worker"
)

// Model is the model side of a worker-executor run, passed through to
// launch: the worker's command and what the agents must agree with it on.
type Model struct {
	WorkerCmd      string        // --worker-cmd: the model worker ({socket}, {rank} replaced)
	EOS            int           // --eos: the checkpoint's EOS token (-1: none)
	ForwardTimeout time.Duration // --forward-timeout: one worker step's deadline
}

// validateExecutor checks the executor ("" is the synthetic one) and, for
// the worker, its model.
func (o Options) validateExecutor() error {
	switch o.Executor {
	case "", SyntheticExecutor:
		if o.Model.WorkerCmd != "" {
			return fmt.Errorf("--worker-cmd: only with --executor worker")
		}
		return nil
	case WorkerExecutor:
	default:
		return fmt.Errorf("--executor: must be synthetic or worker, got %q", o.Executor)
	}
	m := o.Model
	switch {
	case m.WorkerCmd == "":
		return fmt.Errorf("--worker-cmd: --executor worker needs the model worker's command")
	case m.EOS < -1 || m.EOS >= o.Vocab:
		return fmt.Errorf("--eos: must be -1 (none) or a token below --vocab %d, got %d", o.Vocab, m.EOS)
	case m.ForwardTimeout <= 0:
		return fmt.Errorf("--forward-timeout: must be > 0, got %v", m.ForwardTimeout)
	}
	if _, err := worker.SplitCommand(m.WorkerCmd); err != nil {
		return fmt.Errorf("--worker-cmd: %w", err)
	}
	return nil
}

// validateTemperature checks --temperature: 0 (greedy, below 1e-5) to a
// finite positive value.
func (o Options) validateTemperature() error {
	t := float64(o.Temperature)
	if t < 0 || math.IsNaN(t) || math.IsInf(t, 0) {
		return fmt.Errorf("--temperature: must be a finite number >= 0, got %v", o.Temperature)
	}
	return nil
}

// executorArgs are launch's flags for the executor: the synthetic forward
// time, or the worker and its model.
func (o Options) executorArgs() []string {
	if o.Executor != WorkerExecutor {
		return []string{"--forward-time", o.ForwardTime.String()}
	}
	return []string{"--executor", WorkerExecutor, "--worker-cmd", o.Model.WorkerCmd,
		"--eos", strconv.Itoa(o.Model.EOS), "--forward-timeout", o.Model.ForwardTimeout.String()}
}
