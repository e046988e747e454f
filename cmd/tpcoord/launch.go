//go:build !agentonly

package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tpcoord/tpcoord/coordinator/agent"
	"github.com/tpcoord/tpcoord/coordinator/gateway"
	"github.com/tpcoord/tpcoord/coordinator/launch"
	"github.com/tpcoord/tpcoord/coordinator/membership"
	"github.com/tpcoord/tpcoord/internal/fielderr"
	"github.com/tpcoord/tpcoord/internal/flaglayer"
	"github.com/tpcoord/tpcoord/internal/rankproc"
)

type launchOptions struct {
	agent         agentOptions
	NProc         int
	ReadyFile     string
	Demo          bool
	DemoRequests  int
	DemoMaxTokens int
	StopGrace     time.Duration
	MaxRestarts   int
	TuneRuntime   bool
	NATSInRank0   bool
	AgentBinary   string
	gw            gatewayOptions
	// ownFlags are a command's flags beyond launch's (serve-model's): not
	// passed on to the ranks either.
	ownFlags []string
}

func newLaunchCmd() *cobra.Command {
	var o launchOptions
	cmd := &cobra.Command{
		Use:   "launch --nproc N [agent flags]",
		Short: "Run a local job: an embedded NATS server and N agent processes (ranks 0..N-1)",
		Long: `Run a whole TP job on this machine. launch starts an embedded NATS server
on 127.0.0.1 (free port, random token) unless --nats is given, and spawns N
'tpcoord agent' processes with memberlist on loopback. The ranks run
tpcoord-agent, the agent-only build, when it is installed beside tpcoord
as the same build: it starts on less CPU (see --agent-binary). With
--nats-in-rank0 rank 0 hosts that server instead (agent --nats-serve) and
publishes its steps to it in-process: a faster fan-out, but rank 0 then
does the server's work for all of the job's traffic (see
docs/benchmarks-broadcast.md). Once every
rank reports ready, launch writes {"nats_url","job","pids"} to --ready-file
and logs it; the URL carries the token. Every job gets a new random message
key (the ranks' --job-key-file, in a private directory removed at the end):
a client holding the URL cannot forge the ranks' steps or heartbeats. Their
memberlist gossip is encrypted with --gossip-key-file if given, else with a
new key of the job's, kept with the message key.

With --tune-runtime (the default) each rank's Go runtime, and launch's own
(it re-executes itself once), is set for a host they share: GOMAXPROCS =
cores/processes (at least 1; launch serving --http keeps every core for the
gateway) and GODEBUG=schedtrace=2147483647, which keeps the runtime's sysmon
thread from parking between steps; variables already set are kept. See
docs/operations.md.

SIGINT/SIGTERM are forwarded to the ranks; launch exits 0 once they stop.
SIGUSR1 is relayed to every rank (flight recorder dumps).
If a rank dies, launch stops the others and exits non-zero naming it;
under --on-peer-loss wait it starts a rank that failed again instead (at
most --max-restarts times per rank in 10 minutes), and the others hold
their requests until the world re-forms with it.
With --demo it submits a few requests, prints their tokens and the output
tokens/s, and exits.

With --http ADDR launch also serves the job's OpenAI-compatible API there
(as 'tpcoord serve' does; a bare port binds loopback) and writes its URL to
the ready file as http_url.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runLaunchCmd(cmd, &o)
		},
	}
	o.flags(cmd.Flags())
	return cmd
}

// flags binds launch's flags, the agent's among them, to o.
func (o *launchOptions) flags(fs *pflag.FlagSet) {
	o.agent.flags(fs)
	hide(fs, "world-size", "rank", "join", "bind") // launch decides them: refused (refuseAgentOnly)
	// Refused (checkLaunchKeys) or set by launch for every rank.
	hide(fs, "nats-serve", "nats-serve-clients", "job-key-file", "local")
	// Help: the agent's flags are the ranks' (telemetry apart), but for
	// those launch itself uses; launch's own follow.
	groupRest(fs, groupRanks)
	setGroup(fs, "", "config", "job", "nats", "nats-creds", "nats-user", "nats-password-file", "nats-nkey-seed",
		"nats-tls-ca", "nats-tls-cert", "nats-tls-key", "gossip-key-file", "insecure")
	o.agent.fields["NProc"] = "nproc"
	o.agent.fields["NATSInRank0"] = "nats-in-rank0"
	fs.IntVar(&o.NProc, "nproc", 2, "number of ranks (agent processes) to start")
	fs.StringVar(&o.ReadyFile, "ready-file", "", "write {\"nats_url\",\"job\",\"pids\"} here once every rank is ready")
	fs.BoolVar(&o.Demo, "demo", false, "submit demo requests, print tokens and tokens/s, then stop")
	fs.IntVar(&o.DemoRequests, "demo-requests", 8, "demo: number of concurrent requests")
	fs.IntVar(&o.DemoMaxTokens, "demo-max-tokens", 64, "demo: max tokens per request")
	fs.DurationVar(&o.StopGrace, o.agent.fields.name("StopGrace", "stop-grace"), 10*time.Second, "time ranks get to stop before they are killed")
	fs.IntVar(&o.MaxRestarts, o.agent.fields.name("MaxRestarts", "max-restarts"), 5, "under --on-peer-loss wait: a rank that fails (exit status other than 0 and 2, or a signal) is started again, at most this many times per rank in 10 minutes; 0 stops the job instead")
	fs.BoolVar(&o.NATSInRank0, "nats-in-rank0", false, "without --nats: rank 0 hosts the NATS server and publishes to it in-process (faster fan-out; rank 0 does the server's work)")
	fs.StringVar(&o.AgentBinary, "agent-binary", "", "the binary the ranks run ('BINARY agent ...'); default: tpcoord's agent-only build beside this binary (its name + \"-agent\") if it is the same build, else this binary. A rank 0 that hosts the NATS server (--nats-in-rank0) runs this binary: the agent-only build has no server")
	o.gw.flags(fs, "http", "")
	fs.BoolVar(&o.TuneRuntime, "tune-runtime", true, "set each rank's Go runtime for a shared host: GOMAXPROCS = cores/nproc, sysmon kept from parking (GODEBUG=schedtrace=2147483647); variables already set win")
}

// launchOwnFlags are launch's flags that are not passed on to the ranks
// (with the agent flags launch sets itself).
var launchOwnFlags = []string{"config", "rank", "world-size", "bind", "join", "nats", "nats-serve", "nats-serve-clients", "local", "gossip-key-file",
	"nproc", "ready-file", "demo", "demo-requests", "demo-max-tokens", "stop-grace", "max-restarts", "tune-runtime", "nats-in-rank0", "agent-binary",
	"http", "served-model-name", "tokenizer", "api-key-file", "tls-cert", "tls-key", "max-body-bytes", "body-timeout", "request-timeout", "resume-window", "default-max-tokens", "chat-max-tokens", "cors-origin"}

func runLaunchCmd(cmd *cobra.Command, o *launchOptions) error {
	fs := cmd.Flags()
	if err := layerConfigQuiet(fs); err != nil {
		return err
	}
	if err := refuseAgentOnly(fs); err != nil {
		return err
	}
	a := &o.agent
	// What launch gives every rank: it binds memberlist on loopback.
	a.WorldSize, a.Rank, a.Join, a.Bind = o.NProc, 0, nil, "127.0.0.1:0"
	if err := checkLaunchKeys(a); err != nil {
		return err
	}
	cfg, err := o.launchConfig(cmd)
	if err != nil {
		return err
	}
	log, err := newLogger(cmd.ErrOrStderr(), a.LogLevel, a.LogFormat)
	if err != nil {
		return err
	}
	gw, err := o.httpGateway(log)
	if err != nil {
		return err
	}
	if o.TuneRuntime {
		// The new process reads --config again: only a regular file
		// can be read twice (not a pipe such as <(...)).
		again := flaglayer.Rereadable(fs)
		if !again && !rankproc.GodebugHas(os.Getenv("GODEBUG"), "schedtrace") {
			log.Warn("not re-executing with the sysmon setting: the config file cannot be read twice (not a regular file)")
		}
		rankproc.TuneSelf(launch.SelfShare(o.NProc, gw != nil), again && reexec, log)
	}
	// Once: this process is the one that stays (TuneSelf re-executes).
	flaglayer.WarnStrays(fs)
	if cfg.Binary == "" && (o.NProc > 1 || !o.NATSInRank0) { // a lone rank 0 hosting NATS runs Self
		cfg.Binary = agentBinary(cfg.Self, log)
	}
	cfg.Env = rankproc.Env(os.Environ(), o.NProc, o.TuneRuntime)
	cfg.AgentArgs = flaglayer.Args(fs, slices.Concat(launchOwnFlags, o.ownFlags)...)
	cfg.Logger = log
	if gw != nil {
		if err := gw.start(cmd.Context(), a, log); err != nil {
			return err
		}
		defer gw.close()
		cfg.HTTPURL = gateway.URL(gw.cfg, gw.ln)
	}
	return runLaunch(cmd.Context(), cfg, o, gw, cmd.OutOrStdout())
}

// launchConfig is the job's configuration from the flags. The ranks'
// binary is set only if --agent-binary names one: the binary beside
// launch is looked for once launch runs with its runtime settings.
func (o *launchOptions) launchConfig(cmd *cobra.Command) (launch.Config, error) {
	a, fs := &o.agent, cmd.Flags()
	natsURL := ""
	if fs.Changed("nats") || os.Getenv(flaglayer.EnvName("nats")) != "" {
		natsURL = a.NATS
	}
	cfg := launch.Config{NProc: o.NProc, NATS: natsURL, NATSAuth: a.NATSAuth, NATSInRank0: o.NATSInRank0, GossipKeyFile: a.GossipKeyFile,
		Job: a.Job, Prefix: a.Prefix, MetricsAddr: a.Telemetry.MetricsAddr, ReadyFile: o.ReadyFile, Tokenizer: o.gw.tokenizer,
		ReadyTimeout: a.RendezvousTimeout + 30*time.Second, StopGrace: o.StopGrace, Output: cmd.ErrOrStderr()}
	if err := o.rankDeath(fs, &cfg); err != nil {
		return cfg, err
	}
	self, err := os.Executable()
	if err != nil {
		return cfg, fmt.Errorf("locate own binary: %w", err)
	}
	cfg.Self = self
	if o.AgentBinary != "" {
		if cfg.Binary, err = launch.Executable(o.AgentBinary); err != nil {
			return cfg, configError("agent-binary: %v", err)
		}
	}
	if err := cfg.Validate(); err != nil {
		return cfg, a.fields.configErr(err)
	}
	return cfg, a.validate()
}

// rankDeath sets what launch does when a rank dies: start it again, as
// often as --max-restarts allows, only under --on-peer-loss wait, whose
// ranks wait for it (under fail the others have stopped by then).
func (o *launchOptions) rankDeath(fs *pflag.FlagSet, cfg *launch.Config) error {
	const name = "max-restarts"
	switch {
	case o.NATSInRank0 && o.agent.OnPeerLoss == agent.OnPeerLossWait:
		// Refused by rank 0 itself (--nats-serve), after the job started.
		return configError("nats-in-rank0: not with --on-peer-loss wait: the bus would die with rank 0, which the other ranks must outlive to re-form")
	case o.MaxRestarts < 0 || o.MaxRestarts > launch.MaxRestarts:
		return configError("%s: must be in [0, %d], got %d", name, launch.MaxRestarts, o.MaxRestarts)
	case o.agent.OnPeerLoss == agent.OnPeerLossWait:
		cfg.MaxRestarts = o.MaxRestarts
	case o.MaxRestarts > 0 && fs.Changed(name):
		return configError("%s: only with --on-peer-loss wait: under fail the other ranks stop when one dies", name)
	}
	return nil
}

// agentBinary is what the ranks run without --agent-binary:
// launch.AgentBinary's choice, with a warning when it passed over a
// binary.
func agentBinary(self string, log *slog.Logger) string {
	path, skipped := launch.AgentBinary(self)
	if skipped != nil {
		log.Warn("the ranks run this binary, not the one beside it", "err", skipped)
	}
	return path
}

// checkLaunchKeys refuses what launch decides itself, and checks the
// gossip keyring once rather than in every rank.
// agentOnlyFlags are the agent's flags launch decides for every rank: set
// by hand (flag, TPC_* or file), they would be overridden silently.
var agentOnlyFlags = map[string]string{
	"world-size": "launch starts --nproc ranks",
	"rank":       "launch gives each rank its own",
	"join":       "launch's ranks join each other",
	"bind":       "launch binds every rank on loopback",
}

// refuseAgentOnly refuses an agent-only flag given to launch.
func refuseAgentOnly(fs *pflag.FlagSet) error {
	for _, name := range []string{"world-size", "rank", "join", "bind"} {
		f := fs.Lookup(name)
		if f != nil && (f.Changed || f.Value.String() != f.DefValue) {
			return configError("%s: an agent's flag, not launch's: %s", name, agentOnlyFlags[name])
		}
	}
	return nil
}

func checkLaunchKeys(a *agentOptions) error {
	switch {
	case a.NATSServe:
		return configError("nats-serve: launch decides where the server runs; use --nats-in-rank0")
	case a.JobKeyFile != "":
		return configError("job-key-file: launch makes a new key for every job it starts and gives it to its ranks")
	case a.GossipKeyFile != "":
		if _, err := membership.ReadKeyring(a.GossipKeyFile); err != nil {
			return a.fields.configErr(fielderr.New("GossipKeyFile", "%w", err))
		}
	}
	return nil
}

// runLaunch runs the job until a signal, a rank's death or, with --demo,
// the demo's end.
func runLaunch(ctx context.Context, cfg launch.Config, o *launchOptions, gw *launchGateway, stdout io.Writer) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	defer signal.Stop(usr1)
	cfg.Forward = usr1
	var use func(context.Context, *launch.Job) error
	if o.Demo {
		model := fmt.Sprintf("synthetic, forward %v", o.agent.ForwardTime)
		if o.agent.Executor == agent.ExecutorWorker {
			model = "model worker"
		}
		d := launch.Demo{Requests: o.DemoRequests, MaxTokens: o.DemoMaxTokens, Vocab: o.agent.Vocab, Label: fmt.Sprintf("TP=%d, %s", o.NProc, model)}
		use = func(ctx context.Context, j *launch.Job) error {
			if err := d.Run(ctx, j, stdout); err != nil {
				return fmt.Errorf("demo: %w", err)
			}
			return nil
		}
	}
	return launch.Run(ctx, cfg, gw.beside(use))
}

// groupRest puts every flag of fs that has no section yet in group.
func groupRest(fs *pflag.FlagSet, group string) {
	fs.VisitAll(func(f *pflag.Flag) {
		if groupOf(f) == "" {
			setGroup(fs, group, f.Name)
		}
	})
}
