package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
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
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/spf13/cobra"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/broadcast/natsbus"
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
}

func newLaunchCmd() *cobra.Command {
	var cfg launchConfig
	cmd := &cobra.Command{
		Use:   "launch --nproc N [agent flags]",
		Short: "Run a local job: an embedded NATS server and N agent processes (ranks 0..N-1)",
		Long: `Run a whole TP job on this machine. launch starts an embedded NATS server on
127.0.0.1 (random port, random token) unless --nats is given, spawns N
'tpcoord agent' processes with memberlist on loopback, and once every rank
reports ready writes {"nats_url","job","pids"} to --ready-file and logs it.

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
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			natsURL := ""
			if fs.Changed("nats") || os.Getenv(envName("nats")) != "" {
				natsURL = a.NATS
			}
			passthrough := agentArgs(fs, "config", "rank", "world-size", "bind", "join", "nats", "local",
				"nproc", "ready-file", "demo", "demo-requests", "demo-max-tokens", "stop-grace")
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
	if natsURL == "" {
		srv, url, err := startEmbeddedNATS()
		if err != nil {
			return err
		}
		defer func() {
			srv.Shutdown()
			srv.WaitForShutdown()
		}()
		natsURL = url
		log.Info("embedded NATS server started", "url", natsbus.Redact(url))
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("locate own binary: %w", err)
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	rank0 := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))

	// Watch heartbeats before any rank starts, so none is missed.
	ncfg := natsbus.Config{URL: natsURL, Name: "tpcoord-launch", Logger: log}
	cfg.agent.natsAuth.apply(&ncfg)
	nc, err := natsbus.Connect(ncfg)
	if err != nil {
		return err
	}
	defer nc.Close()
	subj := broadcast.Subjects{Prefix: cfg.agent.Prefix, Job: job}
	ready := newReadiness(cfg.NProc, broadcast.JobHash(job))
	unsub, err := nc.Subscribe(subj.Heartbeats(), ready.observe)
	if err != nil {
		return err
	}
	defer func() { _ = unsub() }()
	if err := nc.Flush(ctx); err != nil {
		return err
	}

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
		} else {
			args = append(args, "--bind", "127.0.0.1:0", "--join", rank0)
		}
		if addr := rankMetricsAddr(cfg.agent.MetricsAddr, r); addr != "" {
			args = append(args, "--metrics-addr", addr) // later flags win
		}
		c := exec.Command(self, args...)
		c.Stdout, c.Stderr = stderr, stderr
		c.SysProcAttr = childProcAttr()
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
	pids := make([]int, len(children))
	for i, c := range children {
		pids[i] = c.cmd.Process.Pid
	}
	log.Info("ranks started", "nproc", cfg.NProc, "pids", pids)

	// A rank that exits before the job is stopped is a failure of the job.
	failed := func(e childExit) error {
		how := "exited with status 0"
		if e.err != nil {
			how = e.err.Error()
		}
		reason := fmt.Sprintf("rank %d (pid %d) died: %s", e.rank, e.pid, how)
		log.Error("rank died; stopping the others", "failed_rank", e.rank, "pid", e.pid, "how", how)
		// Tell the ranks why first, so rank 0's error replies to open
		// requests and every rank's exit name the dead rank; then stop
		// whatever is left.
		gone[e.rank] = true
		data, _ := json.Marshal(rank.Control{Kind: "peer_lost", Reason: reason, From: "launch"})
		_ = nc.Publish(&broadcast.Msg{Subject: subj.Control(), Data: data})
		_ = nc.Flush(context.Background())
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

// startEmbeddedNATS starts a NATS server on loopback with a random port and
// a random token; the URL it returns carries the token.
func startEmbeddedNATS() (*server.Server, string, error) {
	var tok [16]byte
	if _, err := rand.Read(tok[:]); err != nil {
		return nil, "", err
	}
	token := hex.EncodeToString(tok[:])
	srv, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT, NoSigs: true, NoLog: true,
		Authorization: token, MaxPayload: 8 << 20,
	})
	if err != nil {
		return nil, "", fmt.Errorf("embedded NATS: %w", err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return nil, "", fmt.Errorf("embedded NATS: not ready after 10s")
	}
	addr := srv.Addr().(*net.TCPAddr)
	return srv, fmt.Sprintf("nats://%s@127.0.0.1:%d", token, addr.Port), nil
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
