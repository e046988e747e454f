package launch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/broadcast/natsbus"
	"github.com/tpcoord/tpcoord/internal/fielderr"
	"github.com/tpcoord/tpcoord/internal/freeport"
	"github.com/tpcoord/tpcoord/internal/rankproc"
)

// MaxProcs bounds Config.NProc.
const MaxProcs = 64

// Restarts: Config.MaxRestarts is counted in any RestartWindow, bounded by
// MaxRestarts; a failed rank is started again RestartDelay after its exit.
const (
	MaxRestarts   = 1000
	RestartWindow = 10 * time.Minute
	RestartDelay  = 500 * time.Millisecond
)

// Config is one local job.
type Config struct {
	NProc int // ranks 0..NProc-1
	// Self is the tpcoord binary: the ranks run it ("agent" + arguments)
	// unless Binary is set.
	Self string
	// Binary, if set, is what the ranks run instead: tpcoord's agent-only
	// build (AgentBinary). Rank 0 runs Self when it hosts the NATS server
	// (NATSInRank0): the agent-only build has none.
	Binary string
	// Tokenizer, if set, is given to rank 0 (--tokenizer), which reads its
	// vocabulary to follow structured outputs; rank 0 then runs Self, as
	// the agent-only build has no tokenizers.
	Tokenizer string
	// AgentArgs are passed to every rank after launch's own (--rank,
	// --world-size, --nats, --local, --bind, --join); later flags win.
	AgentArgs []string
	// Env is every rank's environment.
	Env []string
	// NATS is the server the job uses; "" embeds one on loopback with a
	// random token (in this process, or in rank 0 with NATSInRank0).
	NATS        string
	NATSAuth    natsbus.Auth
	NATSInRank0 bool
	// GossipKeyFile is the ranks' gossip keyring; "" makes a new key for
	// the job, as its message key always is.
	GossipKeyFile string
	Job, Prefix   string
	// MetricsAddr, if its port is not 0, gives rank r port+r.
	MetricsAddr string
	ReadyFile   string
	// HTTPURL, if set, is written to the ready file: where the caller
	// serves the job's HTTP API.
	HTTPURL string
	// ReadyTimeout bounds the wait for every rank's first heartbeat.
	ReadyTimeout time.Duration
	// StopGrace is how long ranks get to stop before they are killed.
	StopGrace time.Duration
	// MaxRestarts, if > 0, has a rank that fails once the job is ready
	// started again with its command, as systemd's Restart=on-failure
	// would, at most MaxRestarts times per rank in any RestartWindow: for
	// ranks under --on-peer-loss wait, which hold their requests until the
	// world re-forms. 0: a rank's death stops the job.
	MaxRestarts int
	// Forward relays signals to every live rank (SIGUSR1: flight dumps).
	Forward <-chan os.Signal
	Output  io.Writer // the ranks' stdout and stderr
	Logger  *slog.Logger
}

// Validate reports the first invalid field.
func (c *Config) Validate() error {
	switch {
	case c.NProc < 1 || c.NProc > MaxProcs:
		return fielderr.New("NProc", "must be in [1, %d], got %d", MaxProcs, c.NProc)
	case c.NATSInRank0 && c.NATS != "":
		return fielderr.New("NATSInRank0", "not with a NATS server given (that server is used)")
	case c.Self == "":
		return fielderr.New("Self", "the tpcoord binary must be given")
	case c.StopGrace <= 0:
		return fielderr.New("StopGrace", "must be > 0, got %v", c.StopGrace)
	case c.ReadyTimeout <= 0:
		return fielderr.New("ReadyTimeout", "must be > 0, got %v", c.ReadyTimeout)
	case c.MaxRestarts < 0 || c.MaxRestarts > MaxRestarts:
		return fielderr.New("MaxRestarts", "must be in [0, %d], got %d", MaxRestarts, c.MaxRestarts)
	}
	return nil
}

// ReadyInfo is what the ready file receives once every rank is ready. The
// URL carries the clients' credentials (they may submit requests and read
// replies only) when launch's own server runs the job.
type ReadyInfo struct {
	NATSURL string `json:"nats_url"`
	Job     string `json:"job"`
	PIDs    []int  `json:"pids"`
	// HTTPURL is the OpenAI-compatible API's base URL (launch --http).
	HTTPURL string `json:"http_url,omitempty"`
}

// Job is what a running job offers the caller of Run: its ready
// information and a connection to its bus.
type Job struct {
	Info ReadyInfo
	Bus  broadcast.Transport
	Subj broadcast.Subjects
}

// RankDiedError says a rank exited while the job was running.
type RankDiedError struct {
	Rank, PID int
	How       string // "exit status 3", "signal: killed", ...
	Early     bool   // before NATS was reachable
	// Cause is what rank 0 reported stopped the job, when this rank
	// exited because of it (a lost peer, an abort) rather than being it.
	Cause string
	// Err is the error the rank exited with, as it reported it to launch
	// (rankproc.CauseFileEnv); "" if it reported none (killed, say).
	Err string
	// Logged: launch logged this error when the rank died.
	Logged bool
}

// Reported reports whether launch logged the error already: the command
// need not print it again.
func (e *RankDiedError) Reported() bool { return e.Logged }

func (e *RankDiedError) Error() string {
	how := e.How
	if e.Err != "" {
		how += ": " + e.Err
	}
	switch {
	case e.Early:
		return fmt.Sprintf("rank %d (pid %d) died before NATS was reachable: %s", e.Rank, e.PID, how)
	case e.Cause != "":
		return fmt.Sprintf("%s (rank 0 reported it; rank %d (pid %d) then exited: %s)", e.Cause, e.Rank, e.PID, e.How)
	}
	return fmt.Sprintf("rank %d (pid %d) died: %s", e.Rank, e.PID, how)
}

// Run starts the job and supervises it until ctx ends (the ranks are
// stopped: nil if they all stop in time), a rank dies (*RankDiedError), or
// use, if not nil, returns once the job is ready (its error, else the
// stop's).
func Run(ctx context.Context, cfg Config, use func(context.Context, *Job) error) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Output == nil {
		cfg.Output = io.Discard
	}
	s := &Supervisor{cfg: cfg, log: cfg.Logger.With("job", cfg.Job), exits: make(chan childExit, cfg.NProc), gone: map[int]bool{},
		cause: newFirstCause(), restarts: map[int][]time.Time{}}
	cause := s.run(ctx, use)
	stopErr := s.stop(cause)
	if cause != nil && !errors.Is(cause, errStopped) {
		return cause
	}
	return stopErr
}

// errStopped ends supervision without an error of its own: the job was
// asked to stop (a signal, or the caller's use returned nil).
var errStopped = errors.New("stopped")

// freePort finds a loopback port for what, free for TCP (and UDP if udp:
// memberlist binds both), none of avoid, outside the range the kernel
// hands out to the ranks' own port-0 binds (see freeport).
func freePort(what string, udp bool, avoid ...int) (int, error) {
	p, err := freeport.Pick("127.0.0.1", udp, avoid...)
	if err != nil {
		return 0, fmt.Errorf("no free loopback port for %s: %w", what, err)
	}
	return p, nil
}

// rankMetricsAddr gives rank r its own metrics port: host:(port+r), so one
// metrics address serves a whole local job; port 0 stays 0 (each rank picks
// a free one and reports it in status).
func rankMetricsAddr(addr string, r int) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return ""
	}
	p, err := strconv.Atoi(port)
	if err != nil || p == 0 {
		return ""
	}
	return net.JoinHostPort(host, strconv.Itoa(p+r))
}

// rankArgs is rank r's command line.
func (s *Supervisor) rankArgs(r int, rank0 string, serve bool) []string {
	n := strconv.Itoa(s.cfg.NProc)
	// The NATS URL carries the server's token: it goes in the rank's
	// environment (TPC_NATS, readable by its user only), not its argv,
	// which every user of the host can read.
	args := append([]string{"agent", "--rank", strconv.Itoa(r), "--world-size", n, "--local"}, s.cfg.AgentArgs...)
	if r == 0 {
		args = append(args, "--bind", rank0)
		if s.cfg.Tokenizer != "" {
			args = append(args, "--tokenizer", s.cfg.Tokenizer)
		}
		if serve {
			args = append(args, "--nats-serve")
		}
	} else {
		args = append(args, "--bind", "127.0.0.1:0", "--join", rank0)
	}
	if addr := rankMetricsAddr(s.cfg.MetricsAddr, r); addr != "" {
		args = append(args, "--metrics-addr", addr) // later flags win
	}
	return args
}

// binary is the binary rank r runs: Self for a rank 0 that hosts the NATS
// server or reads a tokenizer, which the agent-only build cannot.
func (s *Supervisor) binary(r int) string {
	if s.cfg.Binary == "" || r == 0 && (s.serve || s.cfg.Tokenizer != "") {
		return s.cfg.Self
	}
	return s.cfg.Binary
}

func (s *Supervisor) spawn(r int, args []string) error {
	c := exec.Command(s.binary(r), args...)
	c.Stdout, c.Stderr = s.cfg.Output, s.cfg.Output
	c.Env = append(withoutVars(s.cfg.Env, natsEnv, serveClientsEnv, jobKeyEnv, gossipKeyEnv, rankproc.CauseFileEnv),
		natsEnv+"="+s.natsURL, jobKeyEnv+"="+s.keyFile(), gossipKeyEnv+"="+s.gossipKeyFile(), rankproc.CauseFileEnv+"="+s.causeFile(r))
	if r == 0 && s.serve {
		c.Env = append(c.Env, serveClientsEnv+"="+s.clientURL)
	}
	c.SysProcAttr = rankproc.DieWithParent()
	if err := c.Start(); err != nil {
		return fmt.Errorf("start rank %d: %w", r, err)
	}
	ch := &child{rank: r, cmd: c}
	if r < len(s.children) {
		ch.restarted = time.Now()
		s.children[r] = ch // started again
	} else {
		s.children = append(s.children, ch)
	}
	s.wg.Go(func() {
		err := c.Wait()
		s.exits <- childExit{rank: ch.rank, pid: c.Process.Pid, err: err}
	})
	return nil
}

// causeFile is where rank r writes the error it exits with.
func (s *Supervisor) causeFile(r int) string {
	return filepath.Join(s.keyDir, "rank-"+strconv.Itoa(r)+".cause")
}

// natsEnv gives a rank the job's NATS URL with the ranks' credentials;
// serveClientsEnv gives rank 0, when it hosts the server, the clients'.
const (
	natsEnv         = "TPC_NATS"
	serveClientsEnv = "TPC_NATS_SERVE_CLIENTS"
)

// withoutVars returns env without the variables names.
func withoutVars(env []string, names ...string) []string {
	out := make([]string, 0, len(env)+len(names))
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(names, name) {
			out = append(out, kv)
		}
	}
	return out
}

func exitHow(e childExit) string {
	if e.err == nil {
		return "exited with status 0"
	}
	return e.err.Error()
}
