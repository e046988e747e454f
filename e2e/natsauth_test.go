package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tpcoord/tpcoord/internal/poll"
)

// The job and users of configs/nats/nats-server.conf.
const (
	authJob      = "llm-granite"
	authStepSubj = "tpc.llm-granite.step"
)

// authServer is Debian's nats-server running the shipped config, moved to
// a free loopback port.
type authServer struct {
	url  string
	pw   map[string]string // user → password file
	conf string            // the configuration file
	kill func()            // kills the running server process
}

func startAuthNATSServer(t *testing.T) *authServer {
	t.Helper()
	if _, err := os.Stat("/usr/sbin/nats-server"); err != nil {
		t.Skipf("/usr/sbin/nats-server is missing (Debian's nats-server package; scripts/deps.sh installs it): %v", err)
	}
	conf, err := os.ReadFile("../configs/nats/nats-server.conf")
	if err != nil {
		t.Fatal(err)
	}
	listen := regexp.MustCompile(`(?m)^listen:.*$`)
	if !listen.Match(conf) {
		t.Fatal("configs/nats/nats-server.conf has no top-level listen: line")
	}
	port := pickPort(t, false)
	conf = listen.ReplaceAll(conf, fmt.Appendf(nil, "listen: 127.0.0.1:%d", port))
	dir := t.TempDir()
	confPath := filepath.Join(dir, "nats-server.conf")
	if err := os.WriteFile(confPath, conf, 0o600); err != nil {
		t.Fatal(err)
	}
	s := &authServer{url: fmt.Sprintf("nats://127.0.0.1:%d", port), pw: map[string]string{}, conf: confPath}
	for _, user := range []string{"rank0", "rank", "client"} {
		p := filepath.Join(dir, user+".pw")
		if err := os.WriteFile(p, []byte("CHANGE-ME-"+user+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		s.pw[user] = p
	}
	s.run(t)
	return s
}

// run starts the server process (again, after kill) and waits until it
// accepts the clients' user.
func (s *authServer) run(t *testing.T) {
	t.Helper()
	log := &syncBuffer{}
	cmd := exec.Command("/usr/sbin/nats-server", "-c", s.conf)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	s.kill = func() {
		_ = cmd.Process.Kill()
		<-exited
	}
	t.Cleanup(func() {
		s.kill()
		if t.Failed() {
			t.Logf("nats-server output:\n%s", log.String())
		}
	})
	poll.UntilDetail(t, 30*time.Second, "nats-server accepting the client user", func() (bool, string) {
		select {
		case <-exited:
			t.Fatalf("nats-server exited:\n%s", log.String())
		default:
		}
		nc, err := nats.Connect(s.url, nats.UserInfo("client", "CHANGE-ME-client"), nats.Timeout(time.Second))
		if err != nil {
			return false, err.Error()
		}
		nc.Close()
		return true, ""
	})
}

// connect dials as user, reporting the server's asynchronous errors (such
// as permission violations) on the returned channel.
func (s *authServer) connect(t *testing.T, user string) (*nats.Conn, <-chan error) {
	t.Helper()
	errs := make(chan error, 16)
	nc, err := nats.Connect(s.url, nats.UserInfo(user, "CHANGE-ME-"+user), nats.Name("e2e-"+user),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case errs <- err:
			default:
			}
		}))
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	t.Cleanup(nc.Close)
	return nc, errs
}

// clientArgs are the flags generate and status need as user client.
func (s *authServer) clientArgs() []string {
	return []string{"--nats", s.url, "--nats-user", "client", "--nats-password-file", s.pw["client"], "--job", authJob}
}

// authStatus runs `tpcoord status --json` as user client.
func authStatus(s *authServer) ([]rankStatus, error) {
	cmd := exec.Command(tpcoordBin, append([]string{"status", "--json"}, s.clientArgs()...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("status: %w: %s", err, stderr.String())
	}
	var st struct {
		Ranks []rankStatus `json:"ranks"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return nil, fmt.Errorf("status output %q: %w", out, err)
	}
	return st.Ranks, nil
}

// authGenerate runs `tpcoord generate --json` as user client.
func authGenerate(t *testing.T, s *authServer, args ...string) generated {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, tpcoordBin, append(append([]string{"generate", "--json"}, s.clientArgs()...), args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("generate %v: %v: %s", args, err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var g generated
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &g); err != nil {
		t.Fatalf("generate output %q: %v", out, err)
	}
	return g
}

// expectPermissionViolation publishes on subject as nc and waits for the
// server to refuse it.
func expectPermissionViolation(t *testing.T, nc *nats.Conn, errs <-chan error, subject string) {
	t.Helper()
	if err := nc.Publish(subject, []byte("forged step")); err != nil {
		t.Fatalf("publish %s: %v", subject, err)
	}
	// The server answers the publish with -ERR before the flush's PONG, so
	// the violation is already on its way once Flush returns.
	if err := nc.FlushTimeout(10 * time.Second); err != nil {
		t.Fatalf("flush: %v", err)
	}
	select {
	case err := <-errs:
		if !errors.Is(err, nats.ErrPermissionViolation) && !strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
			t.Fatalf("publish on %s: async error %v, want a permissions violation", subject, err)
		}
		if !strings.Contains(err.Error(), subject) {
			t.Errorf("permissions violation %q does not name %s", err, subject)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("publish on %s by %s was not refused", subject, nc.Opts.User)
	}
}

// TestNATSAuthPermissions runs a two-rank job against nats-server with the
// shipped configs/nats/nats-server.conf: the ranks and the client work
// with their own users, and neither a client nor a follower may forge a
// step.
func TestNATSAuthPermissions(t *testing.T) {
	srv := startAuthNATSServer(t)
	agents := startAuthAgents(t, srv)
	authLockstep(t, srv, agents, "both ranks running and answering status as user client")
	checkAuthGenerated(t, authGenerate(t, srv, "--prompt", "1,2,3", "--max-tokens", "8"))
	before := authLockstep(t, srv, agents, "ranks in lockstep after the first request")

	client, clientErrs := srv.connect(t, "client")
	expectPermissionViolation(t, client, clientErrs, authStepSubj)
	follower, followerErrs := srv.connect(t, "rank")
	expectPermissionViolation(t, follower, followerErrs, authStepSubj)
	// A follower may not pose as rank 0's heartbeat either.
	expectPermissionViolation(t, follower, followerErrs, "tpc.llm-granite.hb.0")

	// The forged steps never reached rank 1: it saw no malformed step and
	// stays in lockstep, and the job goes on serving.
	checkAuthGenerated(t, authGenerate(t, srv, "--prompt", "4,5,6", "--max-tokens", "8", "--seed", "7"))
	after := authLockstep(t, srv, agents, "ranks in lockstep after the refused publishes")
	if after[0].Step <= before[0].Step {
		t.Errorf("step did not advance across the second request: %d then %d", before[0].Step, after[0].Step)
	}
	for _, r := range after {
		if n := r.Rejected["step"]; n != 0 {
			t.Errorf("rank %d rejected %d malformed steps: a forged step got through (%v)", r.Rank, n, r.Rejected)
		}
	}
	stopAuthAgents(t, agents)
}

// startAuthAgents starts rank 0 and rank 1 of a two-rank job on srv, each
// as its own NATS user.
func startAuthAgents(t *testing.T, srv *authServer, extra ...string) []*agent {
	t.Helper()
	memberPort := pickPort(t, true)
	return []*agent{startAuthAgent(t, srv, memberPort, 0, extra...), startAuthAgent(t, srv, memberPort, 1, extra...)}
}

// startAuthAgent starts one rank of startAuthAgents' job; rank 0 binds
// memberlist to memberPort, rank 1 joins it.
func startAuthAgent(t *testing.T, srv *authServer, memberPort, rank int, extra ...string) *agent {
	t.Helper()
	args := []string{"--job", authJob, "--world-size", "2", "--local", "--nats", srv.url, "--forward-time", "2ms"}
	if rank == 0 {
		args = append(args, "--bind", fmt.Sprintf("127.0.0.1:%d", memberPort), "--nats-user", "rank0", "--nats-password-file", srv.pw["rank0"])
	} else {
		args = append(args, "--bind", "127.0.0.1:0", "--join", fmt.Sprintf("127.0.0.1:%d", memberPort),
			"--nats-user", "rank", "--nats-password-file", srv.pw["rank"])
	}
	return startAgent(t, rank, append(args, extra...)...)
}

// TestNATSAuthWaitReforms: under --on-peer-loss wait with the shipped
// configuration, a follower killed and started again rejoins the job.
// Rank 0 asks every rank for its status before it re-forms the world, so
// its NATS user must be allowed to publish on the status subject; without
// that it waits forever (the soak run of docs/reliability.md found it).
func TestNATSAuthWaitReforms(t *testing.T) {
	srv := startAuthNATSServer(t)
	memberPort := pickPort(t, true)
	wait := []string{"--on-peer-loss", "wait"}
	agents := []*agent{startAuthAgent(t, srv, memberPort, 0, wait...), startAuthAgent(t, srv, memberPort, 1, wait...)}
	authLockstep(t, srv, agents, "both ranks running")
	if err := agents[1].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-agents[1].exited
	agents[1] = startAuthAgent(t, srv, memberPort, 1, wait...)
	poll.UntilDetail(t, 90*time.Second, "both ranks serving in epoch 1", func() (bool, string) {
		ranks, err := authStatus(srv)
		ok := err == nil && len(ranks) == 2
		for _, r := range ranks {
			ok = ok && r.Epoch == 1 && (r.State == "ready" || r.State == "running")
		}
		return ok, fmt.Sprintf("%+v %v", ranks, err)
	})
	if strings.Contains(agents[0].log.String(), "Permissions Violation") {
		t.Errorf("rank 0 was refused a publish:\n%s", tail(agents[0].log.String(), 10))
	}
	checkAuthGenerated(t, authGenerate(t, srv, "--prompt", "1,2,3", "--max-tokens", "8"))
	stopAuthAgents(t, agents)
}

// authLockstep waits until both ranks answer status, are up ("ready"
// before the first step, "running" after it) and agree.
func authLockstep(t *testing.T, srv *authServer, agents []*agent, what string) []rankStatus {
	t.Helper()
	var ranks []rankStatus
	poll.UntilDetail(t, 90*time.Second, what, func() (bool, string) {
		for _, a := range agents {
			if !a.running() {
				t.Fatalf("rank %d exited: %v", a.rank, a.err)
			}
		}
		var err error
		ranks, err = authStatus(srv)
		if err != nil || len(ranks) != 2 {
			return false, fmt.Sprintf("%+v %v", ranks, err)
		}
		for _, r := range ranks {
			if (r.State != "ready" && r.State != "running") || r.Step != ranks[0].Step || r.Digest != ranks[0].Digest {
				return false, fmt.Sprintf("%+v", ranks)
			}
		}
		return true, ""
	})
	return ranks
}

// checkAuthGenerated checks a request for 8 tokens got them, or stopped
// early.
func checkAuthGenerated(t *testing.T, g generated) {
	t.Helper()
	if len(g.Tokens) != 8 && (g.FinishReason != "stop" || len(g.Tokens) > 8) {
		t.Fatalf("generate: %d tokens, finish %q; want 8 tokens or a stop", len(g.Tokens), g.FinishReason)
	}
}

// stopAuthAgents sends every agent SIGTERM and expects each to exit cleanly
// within 60 seconds.
func stopAuthAgents(t *testing.T, agents []*agent) {
	t.Helper()
	for _, a := range agents {
		if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range agents {
		select {
		case <-a.exited:
			if a.err != nil {
				t.Errorf("rank %d exited with %v after SIGTERM", a.rank, a.err)
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("rank %d did not exit within 60s of SIGTERM", a.rank)
		}
	}
}

// TestNATSAuthServerRestartKeepsRequests: with the shipped configuration,
// a request in flight while the NATS server is restarted still gets its
// tokens. Rank 0 answers clients on their reply inboxes; a server that
// only allowed it the replies to requests it delivered (allow_responses)
// forgets them when it restarts and refuses every later token of the
// requests in flight, which then end as lost (the soak run of
// docs/reliability.md found it).
func TestNATSAuthServerRestartKeepsRequests(t *testing.T) {
	srv := startAuthNATSServer(t)
	agents := startAuthAgents(t, srv, "--forward-time", "10ms")
	authLockstep(t, srv, agents, "both ranks running")
	type result struct {
		out    []byte
		err    error
		stderr string
	}
	done := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, tpcoordBin, append([]string{"generate", "--json"},
			append(srv.clientArgs(), "--prompt", "5,6,7", "--max-tokens", "600", "--ignore-eos", "--seed", "3")...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		done <- result{out, err, stderr.String()}
	}()
	poll.UntilDetail(t, 60*time.Second, "the request decoding", func() (bool, string) {
		ranks, err := authStatus(srv)
		return err == nil && len(ranks) == 2 && ranks[0].Rows == 1 && ranks[0].Step > 20, fmt.Sprintf("%+v %v", ranks, err)
	})
	srv.kill()
	srv.run(t)
	var r result
	select {
	case r = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the request did not end")
	}
	if r.err != nil {
		t.Fatalf("the request in flight across the restart: %v: %s\nrank 0:\n%s", r.err, r.stderr, tail(agents[0].log.String(), 10))
	}
	var g generated
	if err := json.Unmarshal(r.out, &g); err != nil || len(g.Tokens) != 600 {
		t.Fatalf("generate output %q (%v): want 600 tokens", r.out, err)
	}
	stopAuthAgents(t, agents)
}
