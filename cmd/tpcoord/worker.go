//go:build !agentonly

package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/tpcoord/tpcoord/internal/buildinfo"
	"github.com/tpcoord/tpcoord/rank/worker"
)

// workerCmdConfig configures `tpcoord worker`.
type workerCmdConfig struct {
	Socket      string
	Listen      string
	Vocab       int
	MaxBatch    int
	EOS         int
	DType       string
	ForwardTime time.Duration
	MaxVersion  uint32
	KVBlocks    int
	BlockSize   int
	MaxModelLen int
	LogLevel    string
	LogFormat   string
}

func newWorkerCmd() *cobra.Command {
	var cfg workerCmdConfig
	cmd := &cobra.Command{
		Use:   "worker --socket PATH | --listen PATH",
		Short: "Run a model worker with the synthetic model (the Go twin of examples/worker/worker.py)",
		Long: `Run a model worker that speaks the worker protocol (docs/worker-protocol.md)
and computes the synthetic executor's logits, bit for bit. With --socket it
connects to the agent that started it (--worker-cmd "tpcoord worker --socket
{socket}"); with --listen it serves agents that connect to it
(--worker-socket), one at a time, until stopped.

--vocab, --max-batch, --eos and --dtype, when given, are what the worker
reports in the handshake (the agent refuses a mismatch); by default it
takes the agent's values. --kv-blocks, --block-size and --max-model-len are
the paged KV cache it reports in protocol version 3 and checks every
FORWARD's block tables against. With --kv-blocks > 0 it keeps each block's
tokens as its "KV" and computes the logits from the history read back
through a row's block table (cached prefixes included), so a wrong table
gives other logits, and a read of a slot never written is an error.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sc, err := cfg.serveConfig(cmd.Flags().Changed("eos"))
			if err != nil {
				return err
			}
			log, err := newLogger(cmd.ErrOrStderr(), cfg.LogLevel, cfg.LogFormat)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runWorker(ctx, cfg, sc, log)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&cfg.Socket, "socket", "", "connect to the agent listening on this Unix socket (default $TPCOORD_WORKER_SOCKET)")
	fs.StringVar(&cfg.Listen, "listen", "", "listen on this Unix socket and serve agents one at a time")
	fs.IntVar(&cfg.Vocab, "vocab", 0, "report this vocabulary size (default: the agent's)")
	fs.IntVar(&cfg.MaxBatch, "max-batch", 0, "report this max batch (default: the agent's)")
	fs.IntVar(&cfg.EOS, "eos", 0, "report this EOS token, -1 for none (default: the agent's)")
	fs.StringVar(&cfg.DType, "dtype", "", "report this logits dtype: float32, float16, bfloat16 (default: the agent's)")
	fs.DurationVar(&cfg.ForwardTime, "forward-time", 0, "wall time of one forward pass")
	fs.Uint32Var(&cfg.MaxVersion, "max-version", 0, "speak worker protocol versions up to this one (default: the highest, 3; 1 or 2 stands in for a worker of that version)")
	fs.IntVar(&cfg.KVBlocks, "kv-blocks", 0, "KV cache blocks it keeps and reports in the handshake (protocol 3; 0: no paged cache)")
	fs.IntVar(&cfg.BlockSize, "block-size", worker.DefaultBlockSize, "tokens per KV block reported in the handshake (protocol 3)")
	fs.IntVar(&cfg.MaxModelLen, "max-model-len", 0, "the model's context reported in the handshake (protocol 3; 0: none)")
	fs.StringVar(&cfg.LogLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&cfg.LogFormat, "log-format", logFormatAuto, logFormatUsage)
	return cmd
}

// serveConfig checks the flags (errors name the flag, exit 2) and turns
// them into the worker's ServeConfig. eosSet says whether --eos was given:
// its default, 0, is a valid token, so the value alone cannot tell.
func (cfg *workerCmdConfig) serveConfig(eosSet bool) (worker.ServeConfig, error) {
	if (cfg.Socket == "") == (cfg.Listen == "") {
		if cfg.Socket == "" && os.Getenv(worker.SocketEnv) != "" {
			cfg.Socket = os.Getenv(worker.SocketEnv)
		} else {
			return worker.ServeConfig{}, configError("socket: give --socket or --listen (one of them)")
		}
	}
	sc := worker.ServeConfig{Vocab: cfg.Vocab, MaxBatch: cfg.MaxBatch, ForwardTime: cfg.ForwardTime, MaxVersion: cfg.MaxVersion,
		KVBlocks: cfg.KVBlocks, BlockSize: cfg.BlockSize, MaxModelLen: cfg.MaxModelLen,
		Name: "tpcoord worker " + buildinfo.Get().Version + " (synthetic model)"}
	if cfg.BlockSize < 1 {
		return worker.ServeConfig{}, configError("block-size: must be at least 1, got %d", cfg.BlockSize)
	}
	if err := sc.Validate(); err != nil {
		flags := fieldFlags{"MaxVersion": "max-version", "KVBlocks": "kv-blocks", "BlockSize": "block-size", "MaxModelLen": "max-model-len"}
		return worker.ServeConfig{}, flags.configErr(err)
	}
	if eosSet {
		eos := int32(cfg.EOS)
		sc.EOS = &eos
	}
	if cfg.DType != "" {
		dt, err := worker.ParseDType(cfg.DType)
		if err != nil {
			return worker.ServeConfig{}, configError("dtype: %w", err)
		}
		sc.DType = dt
	}
	return sc, nil
}

func runWorker(ctx context.Context, cfg workerCmdConfig, sc worker.ServeConfig, log *slog.Logger) error {
	if cfg.Socket != "" {
		return worker.ServeAgent(ctx, cfg.Socket, sc)
	}
	return worker.ListenAndServe(ctx, cfg.Listen, sc, log)
}
