package agent

import (
	"context"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"github.com/tpcoord/tpcoord/internal/fielderr"
	"github.com/tpcoord/tpcoord/rank"
	"github.com/tpcoord/tpcoord/rank/worker"
)

// EpochInfo is what an executor is made for: one epoch of the world. A
// model runtime with collectives of its own (torch.distributed) needs a
// fresh process group each epoch, since a rank it knew may be gone; the
// fields are what torchrun would tell it.
type EpochInfo struct {
	Epoch uint32
	Rank  int
	World int
	// LocalRank and LocalWorld count the ranks on this host (members
	// advertising the same address), in rank order.
	LocalRank, LocalWorld int
	// MasterAddr and MasterPort are where rank 0's runtime listens for the
	// rendezvous of its collectives: rank 0's address, and the port rank 0
	// picked for this epoch (0 when the executor needs none).
	MasterAddr string
	MasterPort int
}

// Env is torchrun's environment for the epoch, so that a PyTorch runtime's
// init_process_group(init_method="env://") works unchanged.
func (e EpochInfo) Env() []string {
	env := []string{
		"RANK=" + strconv.Itoa(e.Rank), "WORLD_SIZE=" + strconv.Itoa(e.World),
		"LOCAL_RANK=" + strconv.Itoa(e.LocalRank), "LOCAL_WORLD_SIZE=" + strconv.Itoa(e.LocalWorld),
		"GROUP_RANK=0", "ROLE_RANK=" + strconv.Itoa(e.Rank), "ROLE_WORLD_SIZE=" + strconv.Itoa(e.World),
	}
	if e.MasterPort > 0 {
		env = append(env, "MASTER_ADDR="+e.MasterAddr, "MASTER_PORT="+strconv.Itoa(e.MasterPort))
	}
	return env
}

// ExecutorFactory makes the executor of one epoch; the agent closes it when
// the epoch ends. ctx bounds its start.
type ExecutorFactory func(ctx context.Context, e EpochInfo) (rank.Executor, error)

func (w *WorkerConfig) validate(executor Executor) error {
	if executor != ExecutorWorker {
		return nil
	}
	switch {
	case w.Cmd == "" && w.Socket == "":
		return fielderr.New("Cmd", "the worker executor needs a worker command or a worker socket")
	case w.Cmd != "" && w.Socket != "":
		return fielderr.New("Cmd", "give a worker command or a worker socket, not both")
	case w.ForwardTimeout <= 0:
		return fielderr.New("ForwardTimeout", "must be > 0, got %v", w.ForwardTimeout)
	case w.StartTimeout <= 0:
		return fielderr.New("StartTimeout", "must be > 0, got %v", w.StartTimeout)
	}
	if _, err := worker.ParseDType(w.DType); err != nil {
		return fielderr.New("DType", "%w", err)
	}
	if w.Cmd != "" {
		if _, err := worker.SplitCommand(w.Cmd); err != nil {
			return fielderr.New("Cmd", "%w", err)
		}
	}
	return nil
}

// defaultExecutors makes the executor cfg names: the synthetic load
// generator, or a model worker process.
func defaultExecutors(cfg *Config, log *slog.Logger) ExecutorFactory {
	return func(ctx context.Context, e EpochInfo) (rank.Executor, error) {
		if cfg.Executor != ExecutorWorker {
			ex, err := rank.NewSynthetic(rank.SyntheticConfig{Vocab: cfg.Vocab, EOS: int32(cfg.EOS), ForwardTime: cfg.ForwardTime, Logits: cfg.Samples()})
			if err != nil {
				return nil, err
			}
			return ex, nil
		}
		dt, err := worker.ParseDType(cfg.Worker.DType)
		if err != nil {
			return nil, fielderr.Within("Worker", fielderr.New("DType", "%w", err))
		}
		wc := worker.Config{
			Rank: e.Rank, World: e.World, Vocab: cfg.Vocab, MaxBatch: cfg.MaxBatch, EOS: int32(cfg.EOS), BlockSize: cfg.BlockSize,
			DType: dt, Logits: cfg.Samples(), ForwardTimeout: cfg.Worker.ForwardTimeout, StartTimeout: cfg.Worker.StartTimeout,
			Stdout: os.Stderr, Stderr: os.Stderr, Logger: log, Env: e.Env(),
		}
		if cfg.Worker.Cmd != "" {
			if wc.Command, err = worker.SplitCommand(cfg.Worker.Cmd); err != nil {
				return nil, fielderr.Within("Worker", fielderr.New("Cmd", "%w", err))
			}
		} else {
			wc.Socket = strings.ReplaceAll(cfg.Worker.Socket, "{rank}", strconv.Itoa(e.Rank))
		}
		w, err := worker.Start(ctx, wc)
		if err != nil {
			return nil, err
		}
		return w, nil
	}
}
