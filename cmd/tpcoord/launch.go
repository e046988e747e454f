package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/broadcast/natsbus"
	"github.com/tpcoord/tpcoord/internal/rankproc"
	"github.com/tpcoord/tpcoord/rank"
)

type launchConfig struct {
	agent         agentConfig
	NProc         int
	ReadyFile     string
	Demo          bool
	DemoRequests  int
	DemoMaxTokens int
	StopGrace     time.Duration
	TuneRuntime   bool
	NATSInRank0   bool
}

func newLaunchCmd() *cobra.Command {
	var cfg launchConfig
	cmd := &cobra.Command{
		Use:   "launch --nproc N [agent flags]",
		Short: "Run a local job: an embedded NATS server and N agent processes (ranks 0..N-1)",
		Long: `Run a whole TP job on this machine. launch starts an embedded NATS server
on 127.0.0.1 (free port, random token) unless --nats is given, and spawns N
'tpcoord agent' processes with memberlist on loopback. With --nats-in-rank0
rank 0 hosts that server instead (agent --nats-serve) and publishes its steps
to it in-process: a faster fan-out, but rank 0 then does the server's work
for all of the job's traffic (see docs/benchmarks-broadcast.md). Once every
rank reports ready, launch writes {"nats_url","job","pids"} to --ready-file
and logs it; the URL carries the token.

With --tune-runtime (the default) each rank's Go runtime, and launch's own
(it re-executes itself once), is set for a host they share: GOMAXPROCS =
cores/processes (at least 1) and GODEBUG=schedtrace=2147483647, which keeps
the runtime's sysmon thread from parking between steps; variables already
set are kept. See docs/operations.md.

SIGINT/SIGTERM are forwarded to the ranks; launch exits 0 once they stop.
If a rank dies, launch stops the others and exits non-zero naming it.
With --demo it submits a few requests, prints their tokens and the output
tokens/s, and exits.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fs := cmd.Flags()
			if err := layerConfig(fs); err != nil {
				return err
			}
			if cfg.NProc < 1 || cfg.NProc > 64 {
				return configError("nproc: must be in [1, 64], got %d", cfg.NProc)
			}
			a := cfg.agent
			a.WorldSize, a.Rank, a.Join = cfg.NProc, 0, nil
			if err := a.validate(); err != nil {
				return err
			}
			log, err := newLogger(cmd.ErrOrStderr(), a.LogLevel, a.LogFormat)
			if err != nil {
				return err
			}
			natsURL := ""
			if fs.Changed("nats") || os.Getenv(envName("nats")) != "" {
				natsURL = a.NATS
			}
			switch {
			case a.NATSServe:
				return configError("nats-serve: launch decides where the server runs; use --nats-in-rank0")
			case cfg.NATSInRank0 && natsURL != "":
				return configError("nats-in-rank0: not with --nats (that server is used)")
			}
			if cfg.TuneRuntime {
				// The new process reads --config again: only a regular file
				// can be read twice (not a pipe such as <(...)).
				again := rereadable(fs)
				if !again && !rankproc.GodebugHas(os.Getenv("GODEBUG"), "schedtrace") {
					log.Warn("not re-executing with the sysmon setting: the config file cannot be read twice (not a regular file)")
				}
				rankproc.TuneSelf(cfg.NProc+1, again && reexec, log)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			passthrough := agentArgs(fs, "config", "rank", "world-size", "bind", "join", "nats", "nats-serve", "local",
				"nproc", "ready-file", "demo", "demo-requests", "demo-max-tokens", "stop-grace", "tune-runtime", "nats-in-rank0")
			return runLaunch(ctx, cfg, natsURL, passthrough, cmd.OutOrStdout(), cmd.ErrOrStderr(), log)
		},
	}
	fs := cmd.Flags()
	cfg.agent.flags(fs)
	fs.IntVar(&cfg.NProc, "nproc", 2, "number of ranks (agent processes) to start")
	fs.StringVar(&cfg.ReadyFile, "ready-file", "", "write {\"nats_url\",\"job\",\"pids\"} here once every rank is ready")
	fs.BoolVar(&cfg.Demo, "demo", false, "submit demo requests, print tokens and tokens/s, then stop")
	fs.IntVar(&cfg.DemoRequests, "demo-requests", 8, "demo: number of concurrent requests")
	fs.IntVar(&cfg.DemoMaxTokens, "demo-max-tokens", 64, "demo: max tokens per request")
	fs.DurationVar(&cfg.StopGrace, "stop-grace", 10*time.Second, "time ranks get to stop before they are killed")
	fs.BoolVar(&cfg.NATSInRank0, "nats-in-rank0", false, "without --nats: rank 0 hosts the NATS server and publishes to it in-process (faster fan-out; rank 0 does the server's work)")
	fs.BoolVar(&cfg.TuneRuntime, "tune-runtime", true, "set each rank's Go runtime for a shared host: GOMAXPROCS = cores/nproc, sysmon kept from parking (GODEBUG=schedtrace=2147483647); variables already set win")
	return cmd
}

// readyInfo is what --ready-file receives.
type readyInfo struct {
	NATSURL string `json:"nats_url"`
	Job     string `json:"job"`
	PIDs    []int  `json:"pids"`
}

type child struct {
	rank int
	cmd  *exec.Cmd
}

type childExit struct {
	rank int
	pid  int
	err  error
}

func runLaunch(ctx context.Context, cfg launchConfig, natsURL string, passthrough []string, stdout, stderr io.Writer, log *slog.Logger) (err error) {
	job := cfg.agent.Job
	log = log.With("job", job)
	// Without --nats the server is embedded: here, or with --nats-in-rank0
	// in rank 0 (agent --nats-serve) on a free loopback port with a random
	// token.
	serve := natsURL == "" && cfg.NATSInRank0
	switch {
	case serve:
		tok, err := natsbus.NewToken()
		if err != nil {
			return err
		}
		port, err := freePort()
		if err != nil {
			return err
		}
		natsURL = fmt.Sprintf("nats://%s@127.0.0.1:%d", tok, port)
	case natsURL == "":
		srv, err := natsbus.ServeLoopback()
		if err != nil {
			return err
		}
		defer srv.Close()
		natsURL = srv.URL()
		log.Info("embedded NATS server started", "url", natsbus.Redact(natsURL))
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("locate own binary: %w", err)
	}
	port, err := freePort()
	for err == nil && serve && strings.HasSuffix(natsURL, ":"+strconv.Itoa(port)) {
		port, err = freePort() // both were free, but only one can be bound
	}
	if err != nil {
		return err
	}
	rank0 := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))

	exits := make(chan childExit, cfg.NProc)
	gone := map[int]bool{} // ranks whose exit this goroutine has received
	var children []*child
	var wg sync.WaitGroup
	defer wg.Wait()
	for r := 0; r < cfg.NProc; r++ {
		args := append([]string{"agent", "--rank", strconv.Itoa(r), "--world-size", strconv.Itoa(cfg.NProc),
			"--nats", natsURL, "--local"}, passthrough...)
		if r == 0 {
			args = append(args, "--bind", rank0)
			if serve {
				args = append(args, "--nats-serve")
			}
		} else {
			args = append(args, "--bind", "127.0.0.1:0", "--join", rank0)
		}
		if addr := rankMetricsAddr(cfg.agent.MetricsAddr, r); addr != "" {
			args = append(args, "--metrics-addr", addr) // later flags win
		}
		c := exec.Command(self, args...)
		c.Stdout, c.Stderr = stderr, stderr
		c.Env = rankproc.Env(os.Environ(), cfg.NProc, cfg.TuneRuntime)
		c.SysProcAttr = rankproc.DieWithParent()
		if err := c.Start(); err != nil {
			stopChildren(children, gone, exits, syscall.SIGTERM, 0, cfg.StopGrace, log)
			return fmt.Errorf("start rank %d: %w", r, err)
		}
		ch := &child{rank: r, cmd: c}
		children = append(children, ch)
		wg.Go(func() {
			err := c.Wait()
			exits <- childExit{rank: ch.rank, pid: c.Process.Pid, err: err}
		})
	}
	if serve {
		log.Info("rank 0 hosts the NATS server", "url", natsbus.Redact(natsURL))
	}

	// Connect (while rank 0's server starts, retrying) and watch the ranks'
	// heartbeats; a rank that dies meanwhile ends the wait.
	ncfg := natsbus.Config{URL: natsURL, Name: "tpcoord-launch", Logger: log}
	cfg.agent.natsAuth.apply(&ncfg)
	type dialed struct {
		nc  *natsbus.Conn
		err error
	}
	dctx, dcancel := context.WithCancel(ctx)
	defer dcancel()
	dialCh := make(chan dialed, 1)
	wg.Go(func() {
		nc, err := natsbus.ConnectWait(dctx, ncfg, cfg.agent.RendezvousTimeout)
		dialCh <- dialed{nc, err}
	})
	var nc *natsbus.Conn
	select {
	case d := <-dialCh:
		if d.err != nil {
			stopChildren(children, gone, exits, syscall.SIGTERM, 0, cfg.StopGrace, log)
			if ctx.Err() != nil {
				return nil
			}
			return d.err
		}
		nc = d.nc
	case e := <-exits:
		dcancel()
		if d := <-dialCh; d.nc != nil {
			d.nc.Close()
		}
		gone[e.rank] = true
		serr := stopChildren(children, gone, exits, syscall.SIGTERM, 0, cfg.StopGrace, log)
		if ctx.Err() != nil {
			return serr // a signal (to the whole process group) stopped it
		}
		return fmt.Errorf("rank %d (pid %d) died before NATS was reachable: %s", e.rank, e.pid, exitHow(e))
	}
	defer nc.Close()
	subj := broadcast.Subjects{Prefix: cfg.agent.Prefix, Job: job}
	ready := newReadiness(cfg.NProc, broadcast.JobHash(job))
	unsub, err := nc.Subscribe(subj.Heartbeats(), ready.observe)
	if err != nil {
		stopChildren(children, gone, exits, syscall.SIGTERM, 0, cfg.StopGrace, log)
		return err
	}
	defer func() { _ = unsub() }()
	pids := make([]int, len(children))
	for i, c := range children {
		pids[i] = c.cmd.Process.Pid
	}
	log.Info("ranks started", "nproc", cfg.NProc, "pids", pids)

	// A rank that exits before the job is stopped is a failure of the job.
	failed := func(e childExit) error {
		how := exitHow(e)
		reason := fmt.Sprintf("rank %d (pid %d) died: %s", e.rank, e.pid, how)
		log.Error("rank died; stopping the others", "failed_rank", e.rank, "pid", e.pid, "how", how)
		// Tell the ranks why first, so rank 0's error replies to open
		// requests and every rank's exit name the dead rank; then stop
		// whatever is left.
		gone[e.rank] = true
		// (When rank 0 hosted the server and is the one that died, there is
		// no bus left: the followers notice by themselves.)
		if !(serve && e.rank == 0) {
			data, _ := json.Marshal(rank.Control{Kind: "peer_lost", Reason: reason, From: "launch"})
			_ = nc.Publish(&broadcast.Msg{Subject: subj.Control(), Data: data})
			fctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_ = nc.Flush(fctx)
			cancel()
		}
		// The ranks stop by themselves on that message (exit 3); stragglers
		// get SIGTERM after a moment.
		_ = stopChildren(children, gone, exits, syscall.SIGTERM, 2*time.Second, cfg.StopGrace, log)
		return errors.New(reason)
	}

	timeout := time.NewTimer(cfg.agent.RendezvousTimeout + 30*time.Second)
	defer timeout.Stop()
	progress := time.NewTicker(5 * time.Second)
	defer progress.Stop()
	for !ready.done() {
		select {
		case <-ctx.Done():
			return stopChildren(children, gone, exits, syscall.SIGTERM, 0, cfg.StopGrace, log)
		case e := <-exits:
			return failed(e)
		case <-timeout.C:
			stopChildren(children, gone, exits, syscall.SIGTERM, 0, cfg.StopGrace, log)
			return fmt.Errorf("ranks not ready after %v: missing %v", cfg.agent.RendezvousTimeout+30*time.Second, ready.missing())
		case <-ready.changed:
		case <-progress.C:
			log.Info("waiting for ranks to be ready", "missing", ready.missing())
		}
	}
	info := readyInfo{NATSURL: natsURL, Job: job, PIDs: pids}
	log.Info("job ready", "nats_url", natsURL, "pids", pids)
	if cfg.ReadyFile != "" {
		if err := writeReadyFile(cfg.ReadyFile, info); err != nil {
			stopChildren(children, gone, exits, syscall.SIGTERM, 0, cfg.StopGrace, log)
			return err
		}
	}

	if cfg.Demo {
		demoDone := make(chan error, 1)
		dctx, cancel := context.WithCancel(ctx)
		defer cancel()
		wg.Go(func() { demoDone <- runDemo(dctx, nc, subj, cfg, stdout) })
		select {
		case <-ctx.Done():
			cancel()
			<-demoDone
			return stopChildren(children, gone, exits, syscall.SIGTERM, 0, cfg.StopGrace, log)
		case e := <-exits:
			cancel()
			<-demoDone
			return failed(e)
		case err := <-demoDone:
			serr := stopChildren(children, gone, exits, syscall.SIGTERM, 0, cfg.StopGrace, log)
			if err != nil {
				return fmt.Errorf("demo: %w", err)
			}
			return serr
		}
	}

	// SIGUSR1 asks every rank to dump its flight recorder.
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	defer signal.Stop(usr1)
	for {
		select {
		case <-usr1:
			for _, c := range children {
				if !gone[c.rank] {
					_ = c.cmd.Process.Signal(syscall.SIGUSR1)
				}
			}
		case <-ctx.Done():
			log.Info("signal received; stopping ranks")
			return stopChildren(children, gone, exits, syscall.SIGTERM, 0, cfg.StopGrace, log)
		case e := <-exits:
			return failed(e)
		}
	}
}

// rereadable reports whether the config file, if any, can be read again by
// a re-executed launch.
func rereadable(fs *pflag.FlagSet) bool {
	f := fs.Lookup("config")
	path := f.Value.String()
	if v, ok := os.LookupEnv(envName("config")); ok && !f.Changed {
		path = v // as layerConfig reads it
	}
	if path == "" {
		return true
	}
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular()
}

// exitHow describes how a rank exited.
func exitHow(e childExit) string {
	if e.err == nil {
		return "exited with status 0"
	}
	return e.err.Error()
}

// stopChildren stops every rank not in gone (ranks whose exit was already
// received): it first waits up to quiet for them to exit on their own,
// then signals them, waits up to grace, and kills what is left. It
// consumes their exits and returns an error if a rank had to be killed or
// exited with an error after the signal.
func stopChildren(children []*child, gone map[int]bool, exits <-chan childExit, sig syscall.Signal, quiet, grace time.Duration, log *slog.Logger) error {
	running := map[int]*child{}
	for _, c := range children {
		if !gone[c.rank] {
			running[c.rank] = c
		}
	}
	var errs []error
	wait := func(limit time.Duration, collect bool) {
		timer := time.NewTimer(limit)
		defer timer.Stop()
		for len(running) > 0 {
			select {
			case e := <-exits:
				if _, ok := running[e.rank]; !ok {
					continue
				}
				delete(running, e.rank)
				if collect && e.err != nil {
					errs = append(errs, fmt.Errorf("rank %d (pid %d): %w", e.rank, e.pid, e.err))
				}
			case <-timer.C:
				return
			}
		}
	}
	if quiet > 0 {
		wait(quiet, false)
	}
	for _, c := range running {
		_ = c.cmd.Process.Signal(sig) // one that has just exited: harmless
	}
	wait(grace, true)
	for r, c := range running {
		log.Warn("rank did not stop in time; killing it", "stuck_rank", r, "pid", c.cmd.Process.Pid, "grace", grace)
		_ = c.cmd.Process.Kill()
		errs = append(errs, fmt.Errorf("rank %d (pid %d) killed after %v", r, c.cmd.Process.Pid, grace))
	}
	for len(running) > 0 {
		delete(running, (<-exits).rank)
	}
	if len(errs) > 0 {
		return fmt.Errorf("stopping ranks: %w", errors.Join(errs...))
	}
	log.Info("all ranks stopped")
	return nil
}

// rankMetricsAddr gives rank r its own metrics port: host:(port+r), so one
// --metrics-addr serves a whole local job; port 0 stays 0 (each rank picks
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

// readiness tracks which ranks have reported ready on their heartbeat.
type readiness struct {
	job     uint64
	mu      sync.Mutex
	seen    []bool
	changed chan struct{}
}

func newReadiness(n int, job uint64) *readiness {
	return &readiness{job: job, seen: make([]bool, n), changed: make(chan struct{}, 1)}
}

func (r *readiness) observe(m *broadcast.Msg) {
	var hb broadcast.Heartbeat
	if broadcast.DecodeHeartbeat(m.Data, r.job, &hb) != nil || hb.Phase < broadcast.PhaseReady || hb.Phase > broadcast.PhaseRunning {
		return
	}
	r.mu.Lock()
	if int(hb.Rank) < len(r.seen) {
		r.seen[hb.Rank] = true
	}
	r.mu.Unlock()
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

func (r *readiness) missing() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []int
	for i, ok := range r.seen {
		if !ok {
			out = append(out, i)
		}
	}
	return out
}

func (r *readiness) done() bool { return len(r.missing()) == 0 }

func writeReadyFile(path string, info readyInfo) error {
	data, _ := json.Marshal(info)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("ready-file: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("ready-file: %w", err)
	}
	return nil
}

// freePort finds a port free for both TCP and UDP on loopback (memberlist
// uses both).
func freePort() (int, error) {
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		l.Close()
		if err == nil {
			u.Close()
			return port, nil
		}
	}
	return 0, fmt.Errorf("no free loopback port for memberlist")
}
