package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.opentelemetry.io/otel"

	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/coordinator/agent"
	"github.com/tpcoord/tpcoord/coordinator/membership"
	"github.com/tpcoord/tpcoord/internal/buildinfo"
	"github.com/tpcoord/tpcoord/internal/fielderr"
	"github.com/tpcoord/tpcoord/internal/sdnotify"
	"github.com/tpcoord/tpcoord/internal/telemetry"
	"github.com/tpcoord/tpcoord/rank"
)

// agentOptions is what the agent command's flags, TPC_* variables and YAML
// file fill (see layerConfig): the library's configuration plus the CLI's
// own settings.
type agentOptions struct {
	agent.Config
	ConfigFile string
	LogLevel   string
	LogFormat  string
	fields     fieldFlags
}

func (c *agentOptions) flags(fs *pflag.FlagSet) {
	c.Config = agent.DefaultConfig()
	c.fields = fieldFlags{}
	def, f := agent.DefaultConfig(), c.fields
	fs.StringVar(&c.ConfigFile, "config", "", "YAML config file; keys are flag names (precedence: flag > TPC_* env > file > default)")
	fs.StringVar(&c.Job, f.name("Job", "job"), def.Job, "job ID: names the NATS subjects and the memberlist label")
	fs.IntVar(&c.Rank, f.name("Rank", "rank"), def.Rank, "this agent's TP rank, 0..world-size-1 (rank 0 schedules and samples)")
	fs.IntVar(&c.WorldSize, f.name("WorldSize", "world-size"), def.WorldSize, "number of TP ranks in the job")
	fs.StringVar(&c.Bind, f.name("Bind", "bind"), def.Bind, "memberlist bind address host:port (port 0 picks a free one); beyond loopback (0.0.0.0 included) it needs --gossip-key-file, or --insecure")
	fs.StringSliceVar(&c.Join, f.name("Join", "join"), def.Join, "comma-separated memberlist peers host:port to join")
	fs.BoolVar(&c.Local, f.name("Local", "local"), def.Local, "use memberlist's fast loopback timings (all ranks on one host)")
	fs.StringVar(&c.NATS, f.name("NATS", "nats"), def.NATS, "NATS server URL")
	fs.BoolVar(&c.NATSServe, f.name("NATSServe", "nats-serve"), def.NATSServe, "rank 0 only: host the NATS server named by --nats in this process (its token or user:password are required of clients) and publish steps to it in-process; launch --nats-in-rank0 uses it")
	fs.StringVar(&c.NATSServeClients, f.name("NATSServeClients", "nats-serve-clients"), def.NATSServeClients, "with --nats-serve: nats://USER:PASSWORD@ of the clients' credentials, which may only submit requests and read replies (give it in TPC_NATS_SERVE_CLIENTS, not on the command line)")
	natsAuthFlags(fs, &c.NATSAuth, f, "NATSAuth")
	c.workerFlags(fs, def)
	c.telemetryFlags(fs, def)
	fs.StringVar(&c.Prefix, f.name("Prefix", "subject-prefix"), def.Prefix, "prefix of the job's NATS subjects")
	fs.IntVar(&c.ReplayWindow, f.name("ReplayWindow", "replay-window"), def.ReplayWindow, "steps rank 0 keeps to replay to a follower that missed some; a follower further behind aborts the job (keep it well above max-lag+1)")
	fs.IntVar(&c.ReplayWindowBytes, f.name("ReplayWindowBytes", "replay-window-bytes"), def.ReplayWindowBytes, "bytes of step messages rank 0 keeps for replay, besides --replay-window's count (oldest dropped first; the newest step is always kept)")
	fs.IntVar(&c.StepQueueBytes, f.name("StepQueueBytes", "step-queue-bytes"), def.StepQueueBytes, "followers: bytes of received steps waiting to be applied; a step beyond this is dropped and recovered by replay (an empty queue takes any step)")
	fs.DurationVar(&c.ReplayTimeout, f.name("ReplayTimeout", "replay-timeout"), def.ReplayTimeout, "followers: deadline of one replay request to rank 0, and the cap of the backoff between retries")
	fs.StringVar((*string)(&c.Executor), f.name("Executor", "executor"), string(def.Executor), "model executor: synthetic (built-in load generator, see --forward-time) or worker (a model worker process, see --worker-cmd)")
	fs.IntVar(&c.Vocab, f.name("Vocab", "vocab"), def.Vocab, "vocabulary size")
	f["NoisePool.Vocab"] = "vocab"
	fs.IntVar(&c.EOS, f.name("EOS", "eos"), def.EOS, "end-of-sequence token ID (-1 for none)")
	fs.IntVar(&c.MaxBatch, f.name("MaxBatch", "max-batch"), def.MaxBatch, "most sequences decoded per step")
	fs.IntVar(&c.MaxBatchTokens, f.name("MaxBatchTokens", "max-batch-tokens"), def.MaxBatchTokens, "most prompt+output tokens across the batch's rows (0: no bound); the oldest waiting request is admitted first")
	fs.IntVar(&c.KVBlocks, f.name("KVBlocks", "kv-blocks"), def.KVBlocks, "the KV cache rank 0 schedules, in blocks of --block-size tokens: admission by blocks, preemption by recompute when they run out (0: the worker's pool, as its handshake reports it; may only lower it; with the synthetic executor 0 is none)")
	fs.IntVar(&c.BlockSize, f.name("BlockSize", "block-size"), def.BlockSize, "tokens one KV block holds (a worker with a paged cache must use the same)")
	fs.IntVar(&c.MaxModelLen, f.name("MaxModelLen", "max-model-len"), def.MaxModelLen, "most tokens, prompt and output, one request may ask for; longer ones are refused (0: the model's context as the worker reports it, else no bound; may only lower it)")
	fs.IntVar(&c.MaxNumBatchedTokens, f.name("MaxNumBatchedTokens", "max-num-batched-tokens"), def.MaxNumBatchedTokens, "most tokens one forward pass feeds over all its rows: a longer prompt is prefilled over several steps while the other rows keep decoding (at least --max-batch; 0: no bound)")
	fs.BoolVar(&c.EnablePrefixCaching, f.name("EnablePrefixCaching", "enable-prefix-caching"), def.EnablePrefixCaching, "with a KV cache: keep computed blocks findable by content, so a request starting with a cached prefix (a shared system prompt, a preempted request) reuses its blocks and computes only the rest (=false: every request computes all its tokens)")
	fs.IntVar(&c.MaxQueue, f.name("MaxQueue", "max-queue"), def.MaxQueue, "most requests waiting for a batch slot; more are refused as overloaded")
	fs.IntVar(&c.MaxLag, f.name("MaxLag", "max-lag"), def.MaxLag, "rank 0 publishes step k only when every follower has applied step k-1-max-lag, so it runs at most max-lag+1 steps ahead of the slowest follower (0: lockstep)")
	fs.DurationVar(&c.ForwardTime, f.name("ForwardTime", "forward-time"), def.ForwardTime, "synthetic executor: wall time of one forward pass")
	c.membershipFlags(fs, def)
	c.samplingFlags(fs, def)
	fs.IntVar(&c.TraceEvery, f.name("TraceEvery", "trace-every"), def.TraceEvery, "trace every Nth step (0: none); spans go to the OTLP exporter")
	fs.StringVar(&c.LogLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&c.LogFormat, "log-format", logFormatAuto, logFormatUsage)
	setGroup(fs, groupTelemetry, "trace-every", "log-level", "log-format")
}

func (c *agentOptions) membershipFlags(fs *pflag.FlagSet, def agent.Config) {
	f := c.fields
	fs.DurationVar(&c.RendezvousTimeout, f.name("RendezvousTimeout", "rendezvous-timeout"), def.RendezvousTimeout, "how long to wait for all ranks to join")
	fs.DurationVar(&c.HeartbeatInterval, f.name("HeartbeatInterval", "heartbeat-interval"), def.HeartbeatInterval, "interval of periodic heartbeats (every rank)")
	fs.DurationVar(&c.HeartbeatTimeout, f.name("HeartbeatTimeout", "heartbeat-timeout"), def.HeartbeatTimeout, "declare a rank lost after this long without its heartbeat, about heartbeat-timeout/heartbeat-interval missed heartbeats; 0 or more than --heartbeat-interval (0: rely on membership alone)")
	fs.DurationVar(&c.LivenessGrace, f.name("LivenessGrace", "liveness-grace"), def.LivenessGrace, "time ranks get to be heard from after this rank starts an epoch or its NATS connection comes back, before --heartbeat-timeout applies")
	fs.DurationVar(&c.ClientTimeout, f.name("ClientTimeout", "client-timeout"), def.ClientTimeout, fmt.Sprintf("rank 0: drop a request whose client promised keepalives (sent every %v) and has gone silent this long; more than %[1]v", api.KeepaliveInterval))
	fs.StringVar((*string)(&c.OnPeerLoss), f.name("OnPeerLoss", "on-peer-loss"), string(def.OnPeerLoss), "when a rank is lost: fail (answer open requests with an error and exit 3) or wait (hold requests, re-form when the rank is back, resume in a new epoch)")
	fs.DurationVar(&c.RankClaimWait, f.name("RankClaimWait", "rank-claim-wait"), def.RankClaimWait, "if another member holds this rank, keep trying this long (it may be a dead process not yet detected) before exiting with code 2")
	fs.DurationVar(&c.Gossip.ProbeInterval, f.name("Gossip.ProbeInterval", "gossip-probe-interval"), def.Gossip.ProbeInterval, "memberlist failure-detector probe interval (0: LAN default 1s, or the --local default)")
	fs.DurationVar(&c.Gossip.ProbeTimeout, f.name("Gossip.ProbeTimeout", "gossip-probe-timeout"), def.Gossip.ProbeTimeout, "memberlist probe timeout (0: LAN default 500ms, or the --local default)")
	fs.DurationVar(&c.Gossip.GossipInterval, f.name("Gossip.GossipInterval", "gossip-interval"), def.Gossip.GossipInterval, "memberlist gossip interval (0: LAN default 200ms, or the --local default)")
	fs.IntVar(&c.Gossip.SuspicionMult, f.name("Gossip.SuspicionMult", "gossip-suspicion-mult"), def.Gossip.SuspicionMult, "memberlist suspicion multiplier: a member that fails a probe is declared dead after gossip-suspicion-mult × max(1, log10(members)) × gossip-probe-interval unless it refutes (0: LAN default 4, or the --local default)")
	fs.StringVar(&c.GossipKeyFile, f.name("GossipKeyFile", "gossip-key-file"), def.GossipKeyFile, "file of base64 16, 24 or 32-byte keys, one a line, readable by its owner only (head -c 32 /dev/urandom | base64; chmod 600): memberlist gossip is encrypted and authenticated with the first and accepted under any (rotation: docs/operations.md); launch makes one per job if not given")
	fs.BoolVar(&c.Insecure, f.name("Insecure", "insecure"), def.Insecure, "allow memberlist beyond loopback without --gossip-key-file and NATS servers beyond loopback without credentials (refused otherwise); logs a warning naming what is exposed")
	fs.StringVar(&c.JobKeyFile, f.name("JobKeyFile", "job-key-file"), def.JobKeyFile, "file with the job's base64 32-byte key, readable by its owner only (head -c 32 /dev/urandom | base64; chmod 600): every step, heartbeat and replay message is sealed with it and refused without it; the same file on every rank (launch makes one)")
}

func (c *agentOptions) samplingFlags(fs *pflag.FlagSet, def agent.Config) {
	f, np := c.fields, def.NoisePool
	// sync, softmax and all are benchmark baselines (tpcoord bench e2e):
	// accepted, but neither --noise's help nor the hidden flags show them.
	fs.StringVar((*string)(&c.Noise), f.name("Noise", "noise"), string(def.Noise), "rank 0's Gumbel noise: pool (pre-generated by background producers) or inline (computed on the sampling path); the tokens are the same")
	fs.StringVar((*string)(&c.Sampling), f.name("Sampling", "sampling"), string(def.Sampling), "sampler: logspace (Gumbel-max in log space) or softmax (benchmark baseline: softmax with exponential noise, sampler.Reference)")
	fs.StringVar((*string)(&c.SamplingRanks), f.name("SamplingRanks", "sampling-ranks"), string(def.SamplingRanks), "ranks that sample: rank0, or all (benchmark baseline: every rank computes logits and samples, followers discard the tokens); all ranks must agree")
	hide(fs, "sampling", "sampling-ranks")
	fs.IntVar(&c.NoisePool.Rows, f.name("NoisePool.Rows", "noise-pool-rows"), np.Rows, "noise pool: vocab-length rows it owns (memory: rows × (vocab + vocab/256) × 4 bytes, block maxima included); at least max-batch × (noise-lookahead + 1) to serve every row")
	fs.IntVar(&c.NoisePool.Producers, f.name("NoisePool.Producers", "noise-producers"), np.Producers, "noise pool: background producer goroutines; -1 (auto) starts as many as fill max-batch rows every noise-step at half a core each, from the cost of a row measured at start")
	fs.DurationVar(&c.NoisePool.Step, f.name("NoisePool.Step", "noise-step"), np.Step, "noise pool: the step time auto producers are sized for (the model's expected step)")
	c.NoisePool.Form = np.Form
	fs.Var(&c.NoisePool.Form, f.name("NoisePool.Form", "noise-form"), "noise pool rows: exact (Gumbel values), bound (upper bounds from one hash and a table load a value; the sampler computes the exact value where a token can win), or auto (exact with the AVX-512 kernel, bound elsewhere)")
	fs.IntVar(&c.NoisePool.Lookahead, f.name("NoisePool.Lookahead", "noise-lookahead"), np.Lookahead, "noise pool: rows prefetched per active stream")
	fs.Int64Var(&c.NoisePool.MaxBytes, f.name("NoisePool.MaxBytes", "noise-max-bytes"), np.MaxBytes, "noise pool: refuse configurations larger than this")
}

// hide keeps flags that only select benchmark baselines out of --help;
// they work as before.
func hide(fs *pflag.FlagSet, names ...string) {
	for _, n := range names {
		if err := fs.MarkHidden(n); err != nil {
			panic(err) // a flag defined above
		}
	}
}

func (c *agentOptions) workerFlags(fs *pflag.FlagSet, def agent.Config) {
	f, w := c.fields, def.Worker
	fs.StringVar(&c.Worker.Cmd, f.name("Worker.Cmd", "worker-cmd"), w.Cmd, `worker executor: command that starts this card's model worker (split like a shell, no shell run); "{socket}" and "{rank}" are replaced by the socket the agent listens on and the rank (also in $TPCOORD_WORKER_SOCKET, $TPCOORD_WORKER_RANK)`)
	fs.StringVar(&c.Worker.Socket, f.name("Worker.Socket", "worker-socket"), w.Socket, `worker executor: connect to a running worker listening on this Unix socket ("{rank}" is replaced by the rank)`)
	fs.StringVar(&c.Worker.DType, f.name("Worker.DType", "worker-dtype"), w.DType, "worker executor: logits type the worker writes: float32, float16 or bfloat16 (16-bit types are widened to float32 on the agent)")
	fs.DurationVar(&c.Worker.ForwardTimeout, f.name("Worker.ForwardTimeout", "forward-timeout"), w.ForwardTimeout, "worker executor: deadline of one forward step; a worker that does not answer in time aborts the job")
	fs.DurationVar(&c.Worker.StartTimeout, f.name("Worker.StartTimeout", "worker-start-timeout"), w.StartTimeout, "worker executor: deadline to start or reach the worker and finish its handshake, model loading included")
}

func (c *agentOptions) telemetryFlags(fs *pflag.FlagSet, def agent.Config) {
	f, t := c.fields, def.Telemetry
	fs.StringVar(&c.Telemetry.OTLPEndpoint, f.name("Telemetry.OTLPEndpoint", "otlp-endpoint"), t.OTLPEndpoint, "export trace spans over OTLP to this collector (host:port or URL, e.g. 127.0.0.1:4317 or http://127.0.0.1:4318); empty: OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT if set, else no export")
	fs.StringVar(&c.Telemetry.OTLPProtocol, f.name("Telemetry.OTLPProtocol", "otlp-protocol"), t.OTLPProtocol, "OTLP protocol: grpc or http (empty: OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL, else grpc for a host:port --otlp-endpoint and http/protobuf, the OpenTelemetry default, otherwise)")
	fs.BoolVar(&c.Telemetry.OTLPInsecure, f.name("Telemetry.OTLPInsecure", "otlp-insecure"), t.OTLPInsecure, "OTLP without TLS (implied by an http:// endpoint URL)")
	fs.StringVar(&c.Telemetry.MetricsAddr, f.name("Telemetry.MetricsAddr", "metrics-addr"), t.MetricsAddr, "serve Prometheus /metrics, /healthz and /readyz on this host:port (empty: off; port 0 picks a free one, logged and shown by status)")
	fs.StringVar(&c.Telemetry.FlightDir, f.name("Telemetry.FlightDir", "flight-dir"), t.FlightDir, "also write flight recorder dumps (on abort and SIGUSR1) to files in this directory")
	fs.IntVar(&c.Telemetry.FlightSteps, f.name("Telemetry.FlightSteps", "flight-steps"), t.FlightSteps, "steps the flight recorder keeps")
	setGroup(fs, groupTelemetry, "otlp-endpoint", "otlp-protocol", "otlp-insecure", "metrics-addr", "flight-dir", "flight-steps")
}

// validate checks the configuration; errors name the flag (exit 2).
func (c *agentOptions) validate() error {
	if err := c.Validate(); err != nil {
		return c.fields.configErr(err)
	}
	return nil
}

func newAgentCmd() *cobra.Command {
	var o agentOptions
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run one TP rank: join the cluster, wait for all ranks, run the decode loop",
		Long: `Run one TP rank. The agent joins the memberlist cluster, waits until ranks
0..world-size-1 are present, connects to NATS and runs the decode loop in
lockstep with the other ranks. Rank 0 takes generate requests, samples and
publishes one step message per step. SIGUSR1 dumps the flight recorder.

Exit codes: 0 stopped cleanly, 1 runtime error, 2 configuration error,
3 a peer rank was lost, 4 aborted (lockstep could not be kept).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := layerConfig(cmd.Flags()); err != nil {
				return err
			}
			if err := o.validate(); err != nil {
				return err
			}
			log, err := newLogger(cmd.ErrOrStderr(), o.LogLevel, o.LogFormat)
			if err != nil {
				return err
			}
			return runAgent(cmd.Context(), &o, log)
		},
	}
	o.flags(cmd.Flags())
	// Launch's own --tokenizer is the gateway's, which it also gives rank 0.
	cmd.Flags().StringVar(&o.Tokenizer, o.fields.name("Tokenizer", "tokenizer"), "",
		`the model's tokenizer (tokenizer.json, its directory, or "tiktoken:<encoding>"): rank 0 reads its vocabulary to follow structured outputs (JSON Schema, regex, choice, grammar); without it such requests are refused. Not in the agent-only build`)
	return cmd
}

// runAgent wires the agent to the process: signals to its context (a
// second SIGINT/SIGTERM kills the process), SIGUSR1 to flight dumps,
// systemd's notifications and watchdog, and its errors to exit codes.
func runAgent(ctx context.Context, o *agentOptions, log *slog.Logger) error {
	sd := sdnotify.New(os.Getenv, os.Getpid(), log)
	stopWatchdog := sd.StartWatchdog()
	defer stopWatchdog()
	otel.SetErrorHandler(telemetry.ErrorHandler(log))
	a, err := agent.New(o.Config, agent.WithLogger(log), agent.WithNotifier(sd), agent.WithVersion(buildinfo.Get().Version), agent.WithVocabLoader(vocabLoader))
	if err != nil {
		return o.fields.configErr(err)
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	// After the first signal, the default action again: a second one kills.
	context.AfterFunc(ctx, stop)
	stopDumps := relay(syscall.SIGUSR1, func(s os.Signal) { a.DumpFlight("signal " + s.String()) })
	defer stopDumps()
	return exitFor(a.Run(ctx), o.fields)
}

// relay calls fn for every sig the process receives until the returned
// function is called; that function waits for the relay to stop.
func relay(sig os.Signal, fn func(os.Signal)) (stop func()) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, sig)
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() { // owned by stop
		defer close(finished)
		for {
			select {
			case <-done:
				return
			case s := <-ch:
				fn(s)
			}
		}
	}()
	return func() {
		signal.Stop(ch)
		close(done)
		<-finished
	}
}

// exitFor maps the agent's outcome to the process's exit code.
func exitFor(err error, fields fieldFlags) error {
	var fe *fielderr.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &fe) || errors.Is(err, membership.ErrRankTaken):
		return fields.configErr(err)
	case errors.Is(err, rank.ErrPeerLost):
		return &exitError{code: exitPeerLost, err: err}
	case errors.Is(err, rank.ErrAborted):
		return &exitError{code: exitAborted, err: err}
	}
	return err
}
