package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/internal/freeport"
	"github.com/tpcoord/tpcoord/rank/client"
)

// restartDelay is how long a process that exited by itself stays down
// before it is started again (systemd's RestartSec, shortened).
const restartDelay = 2 * time.Second

// jobSpec is what a job is started with; the soak and its replay share it
// but for the name.
type jobSpec struct {
	bin      string   // the tpcoord binary
	natsConf string   // the NATS configuration to adapt
	name     string   // --job
	procs    string   // prefix of the processes' names in the reports
	world    int      // --world-size
	flags    []string // every rank's other flags
	keyFile  string   // --job-key-file, if the agent has it
}

// job is a NATS server, one agent per rank and a gateway (`tpcoord
// serve`), started by hand. The gateway is restarted if it exits by
// itself, as the others are, but no fault aims at it.
type job struct {
	spec  jobSpec
	dir   string
	ev    *eventLog
	nats  *natsServer
	ranks []*proc
	binds []string // memberlist addresses, fixed so a restart reuses them
	subj  broadcast.Subjects
	gw    *proc
	gwURL string // http://127.0.0.1:port
}

func newJob(spec jobSpec, dir string, ev *eventLog) (*job, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	j := &job{spec: spec, dir: dir, ev: ev, subj: broadcast.Subjects{Prefix: "tpc", Job: spec.name}}
	var err error
	if j.nats, err = newNATSServer(dir, spec.natsConf, spec.name, spec.procs+"nats", ev); err != nil {
		return nil, err
	}
	// Free for TCP and UDP (memberlist binds both), and no port twice: the
	// ranks bind theirs later (see freeport).
	used := []int{j.nats.port}
	for range spec.world {
		port, err := freeport.Pick("127.0.0.1", true, used...)
		if err != nil {
			return nil, err
		}
		used = append(used, port)
		j.binds = append(j.binds, fmt.Sprintf("127.0.0.1:%d", port))
	}
	for r := range spec.world {
		name := spec.procs + "rank" + strconv.Itoa(r)
		j.ranks = append(j.ranks, newProc(name, spec.bin, j.agentArgs(r), j.agentEnv(r), filepath.Join(dir, name+".log"), ev, restartDelay))
	}
	port, err := freeport.Pick("127.0.0.1", false, used...)
	if err != nil {
		return nil, err
	}
	j.gwURL = fmt.Sprintf("http://127.0.0.1:%d", port)
	name := spec.procs + "gateway"
	j.gw = newProc(name, spec.bin, j.gatewayArgs(port), j.natsEnv("client"), filepath.Join(dir, name+".log"), ev, restartDelay)
	return j, nil
}

// gatewayArgs are the gateway's flags, as an operator would give them;
// its NATS URL, with the clients' password, is in its environment.
func (j *job) gatewayArgs(port int) []string {
	return []string{"serve", "--job", j.spec.name, "--listen", fmt.Sprintf("127.0.0.1:%d", port), "--log-format", "json"}
}

// agentArgs are rank r's flags, as an operator would give them: rank 0
// joins nobody, the others join rank 0. No secret is on the command line.
func (j *job) agentArgs(r int) []string {
	s := &j.spec
	args := []string{"agent", "--job", s.name, "--rank", strconv.Itoa(r), "--world-size", strconv.Itoa(s.world), "--bind", j.binds[r]}
	if r > 0 {
		args = append(args, "--join", j.binds[0])
	}
	args = append(args, s.flags...)
	if s.keyFile != "" {
		args = append(args, "--job-key-file", s.keyFile)
	}
	return args
}

// agentEnv is rank r's environment: its user's NATS URL.
func (j *job) agentEnv(r int) []string {
	if r == 0 {
		return j.natsEnv("rank0")
	}
	return j.natsEnv("rank")
}

// natsEnv is the soak's environment without its TPC_* variables, and the
// NATS URL with user's password in TPC_NATS.
func (j *job) natsEnv(user string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TPC_") {
			env = append(env, kv)
		}
	}
	return append(env, "TPC_NATS="+j.nats.url(user))
}

// start starts the NATS server, then every rank, waits until the job
// serves, then starts the gateway and waits until it is ready.
func (j *job) start(ctx context.Context, limit time.Duration) error {
	if err := j.nats.p.start(); err != nil {
		return err
	}
	if err := j.nats.waitUp(ctx, 30*time.Second); err != nil {
		return err
	}
	for _, p := range j.ranks {
		if err := p.start(); err != nil {
			return err
		}
	}
	bus := j.client("soak-start")
	defer bus.close()
	if err := waitServing(ctx, bus, j.subj, j.spec.world, limit); err != nil {
		return err
	}
	if err := j.gw.start(); err != nil {
		return err
	}
	gc := newGatewayClient(j.gwURL)
	defer gc.close()
	return gc.waitReady(ctx, 30*time.Second)
}

// client is a connection with the clients' credentials.
func (j *job) client(name string) *clientBus {
	return &clientBus{url: j.nats.url("client"), name: name}
}

// stop stops the gateway, every rank (at once: one that leaves on purpose
// stops the others), then the server.
func (j *job) stop(grace time.Duration) {
	j.gw.stop(grace)
	done := make(chan struct{}, len(j.ranks))
	for _, p := range j.ranks {
		go func() { p.stop(grace); done <- struct{}{} }()
	}
	for range j.ranks {
		<-done
	}
	j.nats.p.stop(grace)
}

// pollStatus asks every rank for its status once.
func pollStatus(ctx context.Context, bus *clientBus, subj broadcast.Subjects, world int) (statusPoll, []api.RankStatus) {
	p := statusPoll{T: time.Now()}
	c, err := bus.get(ctx)
	if err != nil {
		p.Err = err.Error()
		return p, nil
	}
	wait := 800 * time.Millisecond
	sctx, cancel := context.WithTimeout(ctx, wait+time.Second)
	defer cancel()
	st, err := client.CollectStatus(sctx, c, subj, wait)
	if err != nil {
		p.Err = err.Error()
	}
	for _, s := range st {
		if s.Rank >= 0 && s.Rank < world {
			p.Ranks = append(p.Ranks, rankState{Rank: s.Rank, State: s.State, Epoch: s.Epoch, Step: s.Step, Rows: s.Rows, Member: s.Member, Digest: s.Digest})
		}
	}
	return p, st
}

// waitServing polls until every rank serves, in one epoch.
func waitServing(ctx context.Context, bus *clientBus, subj broadcast.Subjects, world int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		p, _ := pollStatus(ctx, bus, subj, world)
		if _, ok := p.serving(world); ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the job did not serve within %v: last status %+v %s", limit, p.Ranks, p.Err)
		}
		if err := sleepCtx(ctx, 500*time.Millisecond); err != nil {
			return err
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
