package launch

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/broadcast/natsbus"
	"github.com/tpcoord/tpcoord/internal/rankproc"
)

type child struct {
	rank      int
	cmd       *exec.Cmd
	restarted time.Time // when it was started again (zero: started with the job)
}

type childExit struct {
	rank int
	pid  int
	err  error
}

// Supervisor is one Run's state. Its methods run on Run's goroutine only,
// but for the goroutines that wait for children (wg), which report on exits.
type Supervisor struct {
	cfg Config
	log *slog.Logger

	srv       *natsbus.Server // embedded here, or nil
	natsURL   string          // what ranks (and launch) connect with
	clientURL string          // what clients are given: the ready file's URL
	serve     bool            // rank 0 hosts the server
	natsPort  int             // its port, if so
	children  []*child
	exits     chan childExit
	gone      map[int]bool // ranks whose exit was received
	wg        sync.WaitGroup
	nc        *natsbus.Conn // launch's own connection, once made
	unsubs    []func() error
	cause     *firstCause // what rank 0 said stopped the job
	key       broadcast.Key
	keyDir    string              // holds the keys' files (makeKeys)
	rank0     string              // rank 0's memberlist address, which the others join
	restarts  map[int][]time.Time // by rank: when it was started again
	info      *ReadyInfo          // once the job is ready
}

// run is everything up to the stop: it returns why the job stops.
func (s *Supervisor) run(ctx context.Context, use func(context.Context, *Job) error) error {
	if err := s.makeKeys(); err != nil {
		return err
	}
	if err := s.startNATS(); err != nil {
		return err
	}
	if err := s.startRanks(); err != nil {
		return err
	}
	if err := s.connect(ctx); err != nil {
		return err
	}
	job, err := s.waitReady(ctx)
	if err != nil {
		return err
	}
	return s.supervise(ctx, job, use)
}

// startNATS decides where the job's server is: the one given, one embedded
// here, or (NATSInRank0) one rank 0 will host on a free port with a random
// token.
func (s *Supervisor) startNATS() error {
	s.natsURL, s.clientURL = s.cfg.NATS, s.cfg.NATS
	s.serve = s.natsURL == "" && s.cfg.NATSInRank0
	switch {
	case s.serve:
		port, err := freePort("rank 0's NATS server", false)
		if err != nil {
			return err
		}
		s.natsPort = port
		if s.natsURL, s.clientURL, err = natsbus.JobURLs(fmt.Sprintf("127.0.0.1:%d", port)); err != nil {
			return err
		}
	case s.natsURL == "":
		// Ranks and clients get different credentials: a client may
		// submit and read replies, never publish a step.
		srv, err := natsbus.ServeLoopbackJob(subjectsOf(s.cfg))
		if err != nil {
			return err
		}
		s.srv, s.natsURL, s.clientURL = srv, srv.URL(), srv.ClientURL()
		s.log.Info("embedded NATS server started", "url", natsbus.Redact(s.natsURL))
	}
	return nil
}

func (s *Supervisor) startRanks() error {
	// Not the NATS server's port: rank 0 binds both, and both are free now.
	port, err := freePort("rank 0's memberlist", true, s.natsPort)
	if err != nil {
		return err
	}
	s.rank0 = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	for r := 0; r < s.cfg.NProc; r++ {
		if err := s.spawn(r, s.rankArgs(r, s.rank0, s.serve)); err != nil {
			return err
		}
	}
	if s.serve {
		s.log.Info("rank 0 hosts the NATS server", "url", natsbus.Redact(s.natsURL))
	}
	return nil
}

// connect connects launch to the bus (while rank 0's server starts, it
// retries) and watches the ranks' heartbeats; a rank that dies meanwhile
// ends the wait.
func (s *Supervisor) connect(ctx context.Context) error {
	// With the server embedded here, launch (and a gateway beside it)
	// reaches it through an in-process pipe: no socket write and server
	// wake-up per request and per streamed token.
	ncfg := natsbus.Config{URL: s.natsURL, Name: "tpcoord-launch", Logger: s.log, Auth: s.cfg.NATSAuth, InProcess: s.srv}
	type dialed struct {
		nc  *natsbus.Conn
		err error
	}
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	dialCh := make(chan dialed, 1)
	s.wg.Go(func() {
		nc, err := natsbus.ConnectWait(dctx, ncfg, s.cfg.ReadyTimeout)
		dialCh <- dialed{nc, err}
	})
	select {
	case d := <-dialCh:
		if d.err != nil {
			if ctx.Err() != nil {
				return errStopped
			}
			return d.err
		}
		s.nc = d.nc
		return nil
	case e := <-s.exits:
		cancel()
		if d := <-dialCh; d.nc != nil {
			d.nc.Close()
		}
		s.gone[e.rank] = true
		if ctx.Err() != nil {
			return errStopped // a signal (to the whole process group) stopped it
		}
		return &RankDiedError{Rank: e.rank, PID: e.pid, How: exitHow(e), Early: true, Err: rankproc.ReadCause(s.causeFile(e.rank))}
	}
}

// waitReady waits until every rank reports ready on its heartbeat, then
// writes the ready file.
func (s *Supervisor) waitReady(ctx context.Context) (*Job, error) {
	subj := broadcast.Subjects{Prefix: s.cfg.Prefix, Job: s.cfg.Job}
	ready := newReadiness(s.cfg.NProc, broadcast.NewCodec(broadcast.JobHash(s.cfg.Job), s.key))
	unsub, err := s.nc.Subscribe(subj.Heartbeats(), ready.observe)
	if err != nil {
		return nil, err
	}
	s.unsubs = append(s.unsubs, unsub)
	if unsub, err = s.nc.Subscribe(subj.Control(), s.cause.observe); err != nil {
		return nil, err
	}
	s.unsubs = append(s.unsubs, unsub)
	pids := s.pids()
	attrs := []any{"nproc", s.cfg.NProc, "pids", pids, "binary", s.binary(s.cfg.NProc - 1)}
	if b := s.binary(0); b != s.binary(s.cfg.NProc-1) {
		attrs = append(attrs, "rank0_binary", b)
	}
	s.log.Info("ranks started", attrs...)
	timeout := time.NewTimer(s.cfg.ReadyTimeout)
	defer timeout.Stop()
	progress := time.NewTicker(5 * time.Second)
	defer progress.Stop()
	for !ready.done() {
		select {
		case <-ctx.Done():
			return nil, errStopped
		case e := <-s.exits:
			return nil, s.died(e)
		case <-timeout.C:
			return nil, fmt.Errorf("ranks not ready after %v: missing %v", s.cfg.ReadyTimeout, ready.missing())
		case <-ready.changed:
		case <-progress.C:
			s.log.Info("waiting for ranks to be ready", "missing", ready.missing())
		}
	}
	info := ReadyInfo{NATSURL: s.clientURL, Job: s.cfg.Job, PIDs: pids, HTTPURL: s.cfg.HTTPURL}
	s.info = &info
	s.log.Info("job ready", "nats_url", natsbus.Redact(s.clientURL), "pids", pids, "ready_file", s.cfg.ReadyFile)
	if s.cfg.ReadyFile != "" {
		if err := writeReadyFile(s.cfg.ReadyFile, info); err != nil {
			return nil, err
		}
	}
	return &Job{Info: info, Bus: s.nc, Subj: subj}, nil
}

// supervise runs the job until a signal (ctx), a rank's death (one not
// started again) or, if use is not nil, use's return, with use running
// beside the job; it relays Config.Forward's signals to the ranks
// meanwhile.
func (s *Supervisor) supervise(ctx context.Context, job *Job, use func(context.Context, *Job) error) error {
	var done chan error // nil without use: never ready
	uctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if use != nil {
		done = make(chan error, 1)
		s.wg.Go(func() { done <- use(uctx, job) })
	}
	wait := func() { // for use, once it is told to stop
		if done != nil {
			<-done
		}
	}
	for {
		select {
		case sig := <-s.cfg.Forward:
			s.signalRanks(sig)
		case <-ctx.Done():
			s.log.Info("signal received; stopping ranks")
			wait()
			return errStopped
		case e := <-s.exits:
			if err := s.afterExit(ctx, e); err != nil {
				cancel()
				wait()
				return err
			}
		case err := <-done:
			if err != nil {
				return err
			}
			return errStopped
		}
	}
}

// died records that rank e exited while the job ran: the cause of the
// stop. A rank that exits because of another (a lost peer, an abort: exit
// codes 3 and 4) is not the cause: rank 0 says what was, on the control
// subject, just before it exits; it gets a moment to arrive. Otherwise the
// cause is the rank's own error, which it wrote for launch. It is logged
// here, once, as the job's one error.
func (s *Supervisor) died(e childExit) error {
	s.gone[e.rank] = true
	err := &RankDiedError{Rank: e.rank, PID: e.pid, How: exitHow(e), Err: rankproc.ReadCause(s.causeFile(e.rank)), Logged: true}
	if code := exitCode(e.err); code == 3 || code == 4 {
		err.Cause = s.cause.wait(time.Second)
	}
	cause := cmp.Or(err.Cause, err.Err, "none reported ("+err.How+")")
	s.log.Error(fmt.Sprintf("rank %d (pid %d) died; stopping the others", e.rank, e.pid), "failed_rank", e.rank, "pid", e.pid, "how", err.How, "cause", cause)
	return err
}

// signalRanks relays sig to every live rank but one started again under
// a second ago, which may not handle it yet (SIGUSR1 would kill it).
func (s *Supervisor) signalRanks(sig os.Signal) {
	for _, c := range s.children {
		if !s.gone[c.rank] && (c.restarted.IsZero() || time.Since(c.restarted) > time.Second) {
			_ = c.cmd.Process.Signal(sig)
		}
	}
}

// stop is the one way the job ends, whatever the cause: when a rank died,
// the others are told why first (so rank 0's error replies to open
// requests and every rank's exit name the dead rank) and get a moment to
// stop by themselves; then every rank still running gets SIGTERM, and
// after the grace period SIGKILL. It closes launch's connection and the
// embedded server, and waits for every goroutine Run started. The error
// says which ranks had to be killed or exited with an error after the
// signal.
func (s *Supervisor) stop(cause error) error {
	quiet, busUntil := s.tell(cause)
	err := s.stopChildren(quiet)
	if wait := time.Until(busUntil); wait > 0 {
		t := time.NewTimer(wait)
		<-t.C
	}
	for _, u := range s.unsubs {
		_ = u()
	}
	if s.nc != nil {
		s.nc.Close()
	}
	if s.srv != nil {
		s.srv.Close()
	}
	s.wg.Wait()
	s.removeKeys()
	return err
}

// tell tells the ranks (and rank 0's clients) why the job stops, when a
// rank died: the ranks then get quiet to stop by themselves, and the bus
// stays up until busUntil so that every client of a dead rank 0 hears so
// at its next keepalive, however fast the others stop.
func (s *Supervisor) tell(cause error) (quiet time.Duration, busUntil time.Time) {
	var died *RankDiedError
	if !errors.As(cause, &died) || died.Early {
		return 0, busUntil
	}
	// (When rank 0 hosted the server and is the one that died, there is
	// no bus left: the followers notice by themselves.)
	if s.nc != nil && (!s.serve || died.Rank != 0) {
		s.tellRanks(subjectsOf(s.cfg), died)
		if died.Rank == 0 && died.Cause == "" {
			s.answerForRank0(died)
			busUntil = time.Now().Add(3 * api.KeepaliveInterval)
		}
	}
	return 2 * time.Second, busUntil
}

// answerForRank0 tells the clients of a rank 0 that died so, naming it:
// it answers their keepalives until the stop is over, so each learns it
// within a keepalive interval rather than when the bus goes away.
func (s *Supervisor) answerForRank0(died *RankDiedError) {
	gone, _ := json.Marshal(api.KeepaliveAck{Gone: died.Error()})
	unsub, err := s.nc.Subscribe(subjectsOf(s.cfg).Client(), func(m *broadcast.Msg) {
		if m.Reply != "" {
			_ = s.nc.Publish(&broadcast.Msg{Subject: m.Reply, Data: gone})
		}
	})
	if err != nil {
		s.log.Warn("cannot answer rank 0's clients", "err", err)
		return
	}
	s.unsubs = append(s.unsubs, unsub)
}

func subjectsOf(c Config) broadcast.Subjects { return broadcast.Subjects{Prefix: c.Prefix, Job: c.Job} }

// tellRanks publishes the peer loss on the job's control subject.
func (s *Supervisor) tellRanks(subj broadcast.Subjects, died *RankDiedError) {
	data, _ := json.Marshal(api.Control{Kind: api.ControlPeerLost, Reason: died.Error(), From: "launch"})
	_ = s.nc.Publish(&broadcast.Msg{Subject: subj.Control(), Data: data})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = s.nc.Flush(ctx)
}

// stopChildren waits up to quiet for the ranks not yet gone to exit on
// their own, then signals them, waits up to the grace period, and kills
// what is left. It consumes their exits.
func (s *Supervisor) stopChildren(quiet time.Duration) error {
	running := map[int]*child{}
	for _, c := range s.children {
		if !s.gone[c.rank] {
			running[c.rank] = c
		}
	}
	var errs []error
	if quiet > 0 {
		s.reap(running, quiet, nil)
	}
	for _, c := range running {
		_ = c.cmd.Process.Signal(syscall.SIGTERM) // one that has just exited: harmless
	}
	s.reap(running, s.cfg.StopGrace, &errs)
	for r, c := range running {
		s.log.Warn("rank did not stop in time; killing it", "stuck_rank", r, "pid", c.cmd.Process.Pid, "grace", s.cfg.StopGrace)
		_ = c.cmd.Process.Kill()
		errs = append(errs, fmt.Errorf("rank %d (pid %d) killed after %v", r, c.cmd.Process.Pid, s.cfg.StopGrace))
	}
	for len(running) > 0 {
		delete(running, (<-s.exits).rank)
	}
	if len(errs) > 0 {
		return fmt.Errorf("stopping ranks: %w", errors.Join(errs...))
	}
	if len(s.children) > 0 {
		s.log.Info("all ranks stopped")
	}
	return nil
}

// reap takes exits of running ranks for up to limit; with errs, it
// collects those that exited with an error.
func (s *Supervisor) reap(running map[int]*child, limit time.Duration, errs *[]error) {
	timer := time.NewTimer(limit)
	defer timer.Stop()
	for len(running) > 0 {
		select {
		case e := <-s.exits:
			if _, ok := running[e.rank]; !ok {
				continue
			}
			delete(running, e.rank)
			s.gone[e.rank] = true
			if errs != nil && e.err != nil {
				*errs = append(*errs, fmt.Errorf("rank %d (pid %d): %w", e.rank, e.pid, e.err))
			}
		case <-timer.C:
			return
		}
	}
}
