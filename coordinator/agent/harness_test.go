package agent

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/coordinator/membership"
	"github.com/tpcoord/tpcoord/internal/poll"
	"github.com/tpcoord/tpcoord/rank/client"
)

// memberlist's Shutdown does not wait for a probe in flight: probeNode
// waits out its ack timer (at most a probe interval) after the member is
// gone.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/hashicorp/memberlist.(*Memberlist).probeNode"))
}

// job is a whole job in this process: agents on a broadcast.Hub and a
// membership.Network.
type job struct {
	t     *testing.T
	hub   *broadcast.Hub
	net   *membership.Network
	world int
	edit  func(*Config)
	subj  broadcast.Subjects
	log   *slog.Logger // every agent's, if set

	mu     sync.Mutex
	agents map[int]*member // the live agent of each rank
	seed   string          // rank 0's first address
}

// member is one running agent.
type member struct {
	rank   int
	a      *Agent
	addr   string
	bus    broadcast.Transport
	closed chan struct{} // closing it tells the agent its bus is gone
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

func newJob(t *testing.T, world int, edit func(*Config)) *job {
	j := &job{t: t, hub: broadcast.NewHub(), net: membership.NewNetwork(), world: world, edit: edit,
		subj: broadcast.Subjects{Prefix: "tpc", Job: "inproc"}, agents: map[int]*member{}}
	t.Cleanup(j.stopAll)
	return j
}

// config is the test job's configuration of rank r: fast timings, a small
// vocabulary, a quick synthetic forward pass.
func (j *job) config(r int, join []string) Config {
	c := DefaultConfig()
	c.Job, c.Rank, c.WorldSize, c.Join, c.Local = "inproc", r, j.world, join, true
	c.Vocab, c.EOS, c.ForwardTime, c.Noise, c.MaxBatch = 1024, 0, 2*time.Millisecond, NoiseInline, 8
	c.HeartbeatInterval, c.HeartbeatTimeout = 50*time.Millisecond, 3*time.Second // membership detects a crash first; a slow race-detector run must not look like one
	c.RendezvousTimeout, c.RankClaimWait = 60*time.Second, 30*time.Second
	c.Gossip = GossipTuning{ProbeInterval: 100 * time.Millisecond, ProbeTimeout: 50 * time.Millisecond, GossipInterval: 50 * time.Millisecond, SuspicionMult: 2}
	if j.edit != nil {
		j.edit(&c)
	}
	return c
}

// start starts rank r at addr ("" for a new address) joining join.
func (j *job) start(r int, addr string, join []string) *member {
	j.t.Helper()
	tr, err := j.net.Transport(addr)
	if err != nil {
		j.t.Fatal(err)
	}
	m := &member{rank: r, addr: tr.Addr(), bus: j.hub.Connect(), closed: make(chan struct{}), done: make(chan error, 1)}
	log := slog.New(slog.DiscardHandler)
	switch {
	case j.log != nil:
		log = j.log.With("test_rank", r)
	case testing.Verbose():
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("test_rank", r)
	}
	a, err := New(j.config(r, join), WithBus(Bus{Main: m.bus, Closed: m.closed, MaxPayload: 1 << 20}),
		WithMemberlistTransport(tr), WithLogger(log), WithVersion("test"))
	if err != nil {
		j.t.Fatal(err)
	}
	m.a = a
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	go func() { m.done <- a.Run(ctx) }() // owned by the test: stopAll and wait collect it
	j.mu.Lock()
	j.agents[r] = m
	if r == 0 && j.seed == "" {
		j.seed = m.addr
	}
	j.mu.Unlock()
	return m
}

// startWorld starts ranks 0..world-1, followers joining rank 0, and waits
// until every rank runs its decode loop.
func (j *job) startWorld() []*member {
	j.t.Helper()
	ms := []*member{j.start(0, "", nil)}
	for r := 1; r < j.world; r++ {
		ms = append(ms, j.start(r, "", []string{ms[0].addr}))
	}
	for _, m := range ms {
		j.waitState(m, 0, "running", "ready")
	}
	return ms
}

// wait returns the agent's Run result, waiting for it up to a minute.
func (m *member) wait(t *testing.T) error {
	t.Helper()
	m.once.Do(func() {
		select {
		case m.err = <-m.done:
		case <-time.After(time.Minute):
			t.Fatalf("rank %d: Run did not return within a minute", m.rank)
		}
	})
	return m.err
}

// crash stops rank r as a killed process stops: off the network at once,
// its bus gone, no goodbye.
func (j *job) crash(m *member) {
	j.t.Helper()
	j.net.Cut(m.addr, true)
	m.bus.Close()
	close(m.closed)
	m.cancel()
	_ = m.wait(j.t)
	j.net.Cut(m.addr, false)
}

func (j *job) stopAll() {
	j.mu.Lock()
	ms := make([]*member, 0, len(j.agents))
	for _, m := range j.agents {
		ms = append(ms, m)
	}
	j.mu.Unlock()
	for _, m := range ms {
		m.cancel()
	}
	for _, m := range ms {
		_ = m.wait(j.t)
	}
}

// waitState polls rank m's status until it is in epoch and one of states.
func (j *job) waitState(m *member, epoch uint32, states ...string) {
	j.t.Helper()
	poll.Until(j.t, 60*time.Second, fmt.Sprintf("rank %d in epoch %d, state %v", m.rank, epoch, states), func() bool {
		st := m.a.Status()
		for _, s := range states {
			if st.State == s && st.Epoch == epoch {
				return true
			}
		}
		return false
	})
}

// generation is one request in flight.
type generation struct {
	tokens chan int32
	done   chan struct{}
	rep    *api.GenerateReply
	err    error
}

// generate submits a seeded request of n tokens (EOS ignored) from a
// client of its own.
func (j *job) generate(seed uint64, n int) *generation {
	g := &generation{tokens: make(chan int32, n+1), done: make(chan struct{})}
	conn := j.hub.Connect()
	p := api.DefaultParams()
	p.Seed, p.IgnoreEOS, p.Temperature = &seed, true, 0.9
	req := &api.GenerateRequest{PromptTokenIDs: []int32{int32(seed % 1000), 7, 9}, MaxTokens: n, Params: p}
	go func() { // ends when the request does; waitDone collects it
		defer close(g.done)
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		g.rep, g.err = client.Generate(ctx, conn, j.subj, req, func(_ int, tok int32) { g.tokens <- tok })
	}()
	return g
}

func (g *generation) waitTokens(t *testing.T, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		select {
		case <-g.tokens:
		case <-g.done:
			t.Fatalf("request ended after %d of %d tokens: %v", i, n, g.err)
		case <-time.After(time.Minute):
			t.Fatalf("no token %d within a minute", i)
		}
	}
}

func (g *generation) wait(t *testing.T) (*api.GenerateReply, error) {
	t.Helper()
	select {
	case <-g.done:
	case <-time.After(3 * time.Minute):
		t.Fatal("request did not end within 3 minutes")
	}
	return g.rep, g.err
}

// digestsAgree checks that every rank reports the same epoch, step and
// digest once the job is idle.
func (j *job) digestsAgree(ms ...*member) {
	j.t.Helper()
	poll.Until(j.t, 30*time.Second, "every rank at the same step and digest", func() bool {
		first := ms[0].a.Status()
		for _, m := range ms[1:] {
			st := m.a.Status()
			if st.Epoch != first.Epoch || st.Step != first.Step || st.Digest != first.Digest {
				return false
			}
		}
		return first.Step > 0
	})
}
