package membership

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"go.uber.org/goleak"

	"github.com/tpcoord/tpcoord/internal/poll"
)

// memberlist's Shutdown does not wait for a probe in flight: probeNode
// waits out its ack timer (at most a probe interval) after the member is
// gone, whatever the transport.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/hashicorp/memberlist.(*Memberlist).probeNode"))
}

const testJob = "jobt"

// member tracks a started Cluster so that cleanup stops it exactly once,
// however the test stopped it.
type member struct {
	*Cluster
	mu      sync.Mutex
	stopped bool
}

func (m *member) leave(t *testing.T) {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped {
		return
	}
	m.stopped = true
	if err := m.Leave(time.Second); err != nil {
		t.Logf("leave %s: %v", m.Name(), err)
	}
}

// hardStop stops the member without announcing it, as a crash would.
func (m *member) hardStop(t *testing.T) {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stopped = true
	if err := m.ml.Shutdown(); err != nil {
		t.Fatalf("shutdown %s: %v", m.Name(), err)
	}
}

// node is m as memberlist offers it to a peer's NotifyAlive.
func (m *member) node(t *testing.T) *memberlist.Node {
	t.Helper()
	host, port, err := net.SplitHostPort(m.Addr())
	if err != nil {
		t.Fatal(err)
	}
	p, _ := strconv.Atoi(port)
	return &memberlist.Node{Name: m.Name(), Addr: net.ParseIP(host), Port: uint16(p), Meta: m.ownMeta()}
}

type opt func(*Meta)

func withWorld(w int) opt      { return func(m *Meta) { m.World = w } }
func withDigest(d string) opt  { return func(m *Meta) { m.Digest = d } }
func withStarted(s int64) opt  { return func(m *Meta) { m.Started = s } }
func withJob(job string) opt   { return func(m *Meta) { m.Job = job } }
func withVersion(v string) opt { return func(m *Meta) { m.Version = v } }

// start starts a member of a world of size 3 for rank on 127.0.0.1,
// joining join (none for the first member).
func start(t *testing.T, rank int, join []string, opts ...opt) *member {
	t.Helper()
	return startWith(t, rank, join, nil, opts...)
}

// startWith is start with the cluster config changed by cfg (if not nil).
func startWith(t *testing.T, rank int, join []string, cfg func(*Config), opts ...opt) *member {
	t.Helper()
	meta := Meta{Job: testJob, Rank: rank, World: 3, Digest: "cfg-1", NATS: "nats://127.0.0.1:4222", Version: "test"}
	for _, o := range opts {
		o(&meta)
	}
	conf := Config{Meta: meta, Bind: "127.0.0.1:0", Join: join, Local: true}
	if cfg != nil {
		cfg(&conf)
	}
	c, err := Start(conf)
	if err != nil {
		t.Fatalf("Start rank %d: %v", rank, err)
	}
	m := &member{Cluster: c}
	t.Cleanup(func() { m.leave(t) })
	return m
}

type result struct {
	members []Member
	err     error
}

// rendezvous runs Rendezvous in the background.
func rendezvous(ctx context.Context, m *member) <-chan result {
	ch := make(chan result, 1)
	go func() {
		ms, err := m.Rendezvous(ctx)
		ch <- result{ms, err}
	}()
	return ch
}

func ranks(ms []Member) []int {
	var out []int
	for _, m := range ms {
		out = append(out, m.Meta.Rank)
	}
	return out
}

// formWorld starts ranks 0..2 and completes their rendezvous.
func formWorld(t *testing.T) []*member {
	t.Helper()
	return formWorldWith(t, nil)
}

// formWorldWith is formWorld with every member's config changed by cfg.
func formWorldWith(t *testing.T, cfg func(*Config)) []*member {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m0 := startWith(t, 0, nil, cfg)
	members := []*member{m0, startWith(t, 1, []string{m0.Addr()}, cfg), startWith(t, 2, []string{m0.Addr()}, cfg)}
	var results []<-chan result
	for _, m := range members {
		results = append(results, rendezvous(ctx, m))
	}
	for i, ch := range results {
		r := <-ch
		if r.err != nil {
			t.Fatalf("rank %d rendezvous: %v", i, r.err)
		}
		if got := ranks(r.members); !slices.Equal(got, []int{0, 1, 2}) {
			t.Fatalf("rank %d sees world %v", i, got)
		}
	}
	return members
}

func TestRendezvous(t *testing.T) {
	members := formWorld(t)
	names := map[string]bool{}
	for _, m := range members {
		if names[m.Name()] {
			t.Fatalf("two members named %s", m.Name())
		}
		names[m.Name()] = true
		if !strings.HasPrefix(m.Addr(), "127.0.0.1:") || strings.HasSuffix(m.Addr(), ":0") {
			t.Fatalf("Addr() = %q", m.Addr())
		}
	}
	for i, m := range members {
		ms := m.Members()
		if got := ranks(ms); !slices.Equal(got, []int{0, 1, 2}) {
			t.Fatalf("rank %d: Members() ranks %v", i, got)
		}
		for _, x := range ms {
			if x.Meta.Job != testJob || x.Meta.World != 3 || x.Meta.Digest != "cfg-1" || x.Meta.NATS == "" || x.Meta.Started == 0 {
				t.Fatalf("rank %d sees meta %+v", i, x.Meta)
			}
			if !names[x.Name] || x.Addr != members[x.Meta.Rank].Addr() {
				t.Fatalf("rank %d sees member %+v", i, x)
			}
		}
		select {
		case ev := <-m.Events():
			t.Fatalf("rank %d: event %v with nobody gone", i, ev)
		default:
		}
	}
}

func TestRendezvousTimeoutNamesMissingRank(t *testing.T) {
	m0 := start(t, 0, nil)
	m2 := start(t, 2, []string{m0.Addr()})
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	r0, r2 := rendezvous(ctx, m0), rendezvous(ctx, m2)
	for _, ch := range []<-chan result{r0, r2} {
		r := <-ch
		if !errors.Is(r.err, ErrRendezvousTimeout) {
			t.Fatalf("err = %v, want ErrRendezvousTimeout", r.err)
		}
		if r.members != nil {
			t.Fatalf("members %v returned with a timeout", r.members)
		}
		if !strings.Contains(r.err.Error(), "missing ranks [1]") {
			t.Fatalf("error %q does not name missing rank 1", r.err)
		}
	}
}

// TestRefusals: a member whose world size, config digest or rank does not
// fit is kept out of the world; both sides say why.
func TestRefusals(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []opt
		rank int
		want string // in the refusal rank 0 records
	}{
		{"world size", []opt{withWorld(4)}, 2, "world size mismatch"},
		{"config digest", []opt{withDigest("cfg-2")}, 2, "config digest mismatch"},
		{"rank outside world", nil, 5, "outside world size"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m0 := start(t, 0, nil)
			m1 := start(t, 1, []string{m0.Addr()})
			bad := start(t, tc.rank, []string{m0.Addr()}, tc.opts...)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			r0, r1, rb := rendezvous(ctx, m0), rendezvous(ctx, m1), rendezvous(ctx, bad)
			for _, ch := range []<-chan result{r0, r1, rb} {
				r := <-ch
				if !errors.Is(r.err, ErrRendezvousTimeout) {
					t.Fatalf("err = %v, want ErrRendezvousTimeout: the refused member must not complete the world", r.err)
				}
			}
			for _, m := range []*member{m0, m1} {
				for _, x := range m.Members() {
					if x.Name == bad.Name() {
						t.Fatalf("%s accepted the refused member %s", m.Name(), bad.Name())
					}
				}
			}
			if got := ranks(bad.Members()); tc.rank < 3 && len(got) != 1 {
				t.Fatalf("refused member sees %v; it should refuse the others as they refuse it", got)
			}
			m0.mu.Lock()
			refused := m0.refusals[bad.Name()]
			m0.mu.Unlock()
			if !refused {
				t.Fatalf("rank 0 recorded no refusal of %s", bad.Name())
			}
			// The reason, as NotifyAlive gives it to memberlist.
			err := (*delegate)(m0.Cluster).NotifyAlive(bad.node(t))
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), bad.Name()) && tc.name != "rank outside world" {
				t.Fatalf("refusal %v does not say %q and name %s", err, tc.want, bad.Name())
			}
		})
	}
}

// TestOtherJobIgnored: members of another job never see each other (the
// memberlist label differs), so neither refuses nor accepts the other.
func TestOtherJobIgnored(t *testing.T) {
	m0 := start(t, 0, nil, withWorld(2))
	other := start(t, 1, []string{m0.Addr()}, withWorld(2), withJob("other"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if r := <-rendezvous(ctx, other); !errors.Is(r.err, ErrRendezvousTimeout) {
		t.Fatalf("other job's member: %v, want ErrRendezvousTimeout", r.err)
	}
	if got := ranks(m0.Members()); !slices.Equal(got, []int{0}) {
		t.Fatalf("rank 0 sees %v", got)
	}
	// Directly offered, the other job is refused by name.
	if err := (*delegate)(m0.Cluster).NotifyAlive(other.node(t)); err == nil || !strings.Contains(err.Error(), `job "other"`) {
		t.Fatalf("NotifyAlive(other job) = %v", err)
	}
}

func TestSecondClaimantRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	now := time.Now().UnixNano()
	m0 := start(t, 0, nil, withWorld(2), withStarted(now))
	m1 := start(t, 1, []string{m0.Addr()}, withWorld(2), withStarted(now+1))
	r0, r1 := rendezvous(ctx, m0), rendezvous(ctx, m1)
	for _, ch := range []<-chan result{r0, r1} {
		if r := <-ch; r.err != nil {
			t.Fatalf("rendezvous: %v", r.err)
		}
	}
	// A later claimant of rank 1.
	dup := start(t, 1, []string{m0.Addr()}, withWorld(2), withStarted(now+2), withVersion("dup"))
	r := <-rendezvous(ctx, dup)
	if !errors.Is(r.err, ErrRankTaken) {
		t.Fatalf("second claimant: err = %v, want ErrRankTaken", r.err)
	}
	if !strings.Contains(r.err.Error(), m1.Name()) || !strings.Contains(r.err.Error(), dup.Name()) {
		t.Fatalf("error %q does not name both claimants", r.err)
	}
	// The first claimant and rank 0 are unaffected.
	for _, m := range []*member{m0, m1} {
		if got := m.Members(); len(got) != 2 || got[1].Name != m1.Name() {
			t.Fatalf("%s sees %+v", m.Name(), got)
		}
		select {
		case ev := <-m.Events():
			t.Fatalf("%s: event %v", m.Name(), ev)
		default:
		}
		if err := m.refused(); err != nil {
			t.Fatalf("%s refused itself: %v", m.Name(), err)
		}
	}
	// Offered directly, rank 0 refuses the newcomer naming the holder.
	err := (*delegate)(m0.Cluster).NotifyAlive(dup.node(t))
	if !errors.Is(err, ErrRankTaken) || !strings.Contains(err.Error(), m1.Name()) {
		t.Fatalf("rank 0's refusal: %v", err)
	}
	// The holder may be dead and not yet declared so (the newcomer, a rank
	// started again on another address): while ranks are missing, rank
	// 0's formation joins the newcomer's address, which gossip will not
	// bring again.
	if seeds := m0.seeds(); !slices.Contains(seeds, dup.Addr()) {
		t.Fatalf("rank 0 would not join the refused newcomer %s: seeds %v", dup.Addr(), seeds)
	}
}

func TestOlderClaimantOfOwnRank(t *testing.T) {
	// A member that meets an older holder of its own rank gives way; one
	// that meets a younger claimant refuses it and keeps going.
	now := time.Now().UnixNano()
	old := start(t, 1, nil, withWorld(2), withStarted(now))
	young := start(t, 1, nil, withWorld(2), withStarted(now+1))
	if err := (*delegate)(old.Cluster).NotifyAlive(young.node(t)); !errors.Is(err, ErrRankTaken) {
		t.Fatalf("older holder offered the younger claimant: %v", err)
	}
	if err := old.refused(); err != nil {
		t.Fatalf("older holder gave way: %v", err)
	}
	if err := (*delegate)(young.Cluster).NotifyAlive(old.node(t)); !errors.Is(err, ErrRankTaken) {
		t.Fatalf("younger claimant offered the older holder: %v", err)
	}
	if err := young.refused(); !errors.Is(err, ErrRankTaken) {
		t.Fatalf("younger claimant did not give way: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if r := <-rendezvous(ctx, young); !errors.Is(r.err, ErrRankTaken) {
		t.Fatalf("Rendezvous of the member that gave way: %v", r.err)
	}
}

func waitEvent(t *testing.T, m *member, within time.Duration) Event {
	t.Helper()
	select {
	case ev := <-m.Events():
		return ev
	case <-time.After(within):
		t.Fatalf("%s: no membership event within %v", m.Name(), within)
		return Event{}
	}
}

func TestLeaveProducesLeftEvent(t *testing.T) {
	members := formWorld(t)
	gone := members[2]
	name, addr := gone.Name(), gone.Addr()
	gone.leave(t)
	for _, m := range members[:2] {
		ev := waitEvent(t, m, 20*time.Second)
		if !ev.Left || ev.Member.Name != name || ev.Member.Meta.Rank != 2 || ev.Member.Addr != addr {
			t.Fatalf("%s: event %+v, want rank 2 (%s) left", m.Name(), ev, name)
		}
		if !strings.Contains(ev.String(), "rank 2") || !strings.Contains(ev.String(), "left") {
			t.Fatalf("event string %q", ev.String())
		}
	}
	poll.Until(t, 10*time.Second, "the departed member is still listed", func() bool {
		return len(members[0].Members()) == 2 && len(members[1].Members()) == 2
	})
}

func TestHardStopProducesFailedEvent(t *testing.T) {
	members := formWorld(t)
	gone := members[1]
	name := gone.Name()
	gone.hardStop(t)
	for _, m := range []*member{members[0], members[2]} {
		// memberlist's local timings: a probe every second, suspicion of a
		// few seconds; the deadline leaves a wide margin.
		ev := waitEvent(t, m, 30*time.Second)
		if ev.Left || ev.Member.Name != name || ev.Member.Meta.Rank != 1 {
			t.Fatalf("%s: event %+v, want rank 1 (%s) failed", m.Name(), ev, name)
		}
		if !strings.Contains(ev.String(), "failed") {
			t.Fatalf("event string %q", ev.String())
		}
	}
}

// TestNoEventBeforeFormed: losing a peer before the rendezvous completes is
// not an event of the world.
func TestNoEventBeforeFormed(t *testing.T) {
	m0 := start(t, 0, nil)
	m1 := start(t, 1, []string{m0.Addr()})
	// Join without a rendezvous on rank 0's side.
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if r := <-rendezvous(ctx, m1); !errors.Is(r.err, ErrRendezvousTimeout) {
		t.Fatalf("rendezvous: %v", r.err)
	}
	poll.Until(t, 10*time.Second, "rank 0 never saw rank 1", func() bool { return len(m0.Members()) == 2 })
	m1.leave(t)
	poll.Until(t, 10*time.Second, "rank 0 still lists rank 1", func() bool { return len(m0.Members()) == 1 })
	select {
	case ev := <-m0.Events():
		t.Fatalf("event %v before the world formed", ev)
	default:
	}
}

func TestLeaveIsIdempotent(t *testing.T) {
	m := start(t, 0, nil)
	if err := m.Leave(time.Second); err != nil {
		t.Fatalf("first Leave: %v", err)
	}
	if err := m.Leave(time.Second); err != nil {
		t.Fatalf("second Leave: %v", err)
	}
}

func TestStartValidates(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"bad bind", Config{Meta: Meta{Job: "j", World: 1}, Bind: "nonsense"}, "Bind: "},
		{"bad port", Config{Meta: Meta{Job: "j", World: 1}, Bind: "127.0.0.1:99999"}, "Bind: "},
		{"meta too large", Config{Meta: Meta{Job: "j", World: 1, NATS: strings.Repeat("x", MetaLimit)}, Bind: "127.0.0.1:0"}, "metadata"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Start(tc.cfg)
			if err == nil {
				_ = c.Leave(time.Second)
				t.Fatal("Start succeeded")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %q does not mention %q", err, tc.want)
			}
		})
	}
}

func TestMetaRoundTrip(t *testing.T) {
	m := Meta{Job: "j", Rank: 3, World: 4, Digest: "d", NATS: "nats://h:4222", Version: "v1", Started: 42}
	b, err := m.encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeMeta(b)
	if err != nil || got != m {
		t.Fatalf("decodeMeta = %+v, %v", got, err)
	}
	for _, bad := range [][]byte{nil, []byte("{"), []byte("not json")} {
		if _, err := decodeMeta(bad); err == nil {
			t.Errorf("decodeMeta(%q) succeeded", bad)
		}
	}
}

func TestMissingRanks(t *testing.T) {
	mk := func(rs ...int) []Member {
		var out []Member
		for _, r := range rs {
			out = append(out, Member{Meta: Meta{Rank: r}})
		}
		return out
	}
	for _, tc := range []struct {
		present []Member
		world   int
		want    []int
	}{
		{mk(), 3, []int{0, 1, 2}},
		{mk(0, 2), 3, []int{1}},
		{mk(2, 1, 0), 3, nil},
		{mk(0, 7, -1), 2, []int{1}},
		{mk(0), 1, nil},
	} {
		if got := missingRanks(tc.present, tc.world); !slices.Equal(got, tc.want) {
			t.Errorf("missingRanks(%v, %d) = %v, want %v", ranks(tc.present), tc.world, got, tc.want)
		}
	}
}

func TestEventString(t *testing.T) {
	ev := Event{Member: Member{Name: "n", Addr: "a:1", Meta: Meta{Rank: 4}}, Left: true}
	if got, want := ev.String(), "rank 4 (n at a:1) left"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
	ev.Left = false
	if got := ev.String(); !strings.HasSuffix(got, "failed") {
		t.Errorf("%q", got)
	}
	_ = fmt.Sprint(ev)
}

// TestProtocolVersionRefused: a member speaking another wire protocol is
// refused with a message naming both versions.
func TestProtocolVersionRefused(t *testing.T) {
	m0 := start(t, 0, nil)
	other := start(t, 1, nil, func(m *Meta) { m.Proto = 99; m.Version = "future" })
	err := (*delegate)(m0.Cluster).NotifyAlive(other.node(t))
	if err == nil || !strings.Contains(err.Error(), "incompatible protocol version") ||
		!strings.Contains(err.Error(), "speaks wire protocol 99") || !strings.Contains(err.Error(), "speaks 0") {
		t.Fatalf("refusal: %v", err)
	}
}

// TestUpdateMetaReachesEveryMember: a metadata update reaches every member
// without gossip (here gossip and probes, which carry gossip too, are off):
// UpdateMeta exchanges state with each member itself. Otherwise a member
// that joined as the update went out could wait for the periodic state
// exchange, 15 s in the local profile.
func TestUpdateMetaReachesEveryMember(t *testing.T) {
	quiet := func(c *Config) { c.GossipInterval, c.ProbeInterval = time.Hour, time.Hour }
	members := formWorldWith(t, quiet)
	err := members[0].UpdateMeta(func(m *Meta) { m.Epoch = 7 }, 200*time.Millisecond)
	t.Logf("UpdateMeta: %v (the gossip part cannot be confirmed with gossip off)", err)
	for _, m := range members[1:] {
		poll.Until(t, 5*time.Second, fmt.Sprintf("%s does not see rank 0 in epoch 7", m.Name()), func() bool {
			for _, p := range m.Members() {
				if p.Meta.Rank == 0 && p.Meta.Epoch == 7 {
					return true
				}
			}
			return false
		})
	}
}

// TestLocalGossipUncompressed: a --local member gossips uncompressed (on
// loopback compression only costs CPU, which a job of many ranks on few
// cores starts short of); a LAN member keeps memberlist's compression.
func TestLocalGossipUncompressed(t *testing.T) {
	for _, local := range []bool{true, false} {
		c := &Cluster{cfg: Config{Meta: Meta{Job: testJob}, Bind: "127.0.0.1:0", Local: local}}
		mc, err := c.memberlistConfig()
		if err != nil {
			t.Fatal(err)
		}
		if mc.EnableCompression == local {
			t.Fatalf("Local %v: EnableCompression = %v", local, mc.EnableCompression)
		}
	}
}

// TestLocalPacketSize: a --local member of a world up to maxCompoundWorld
// gossips in large packets, a larger world or a LAN member keeps
// memberlist's size; and a large packet, with everything memberlist may
// put around it, fits a loopback datagram and sockets' read buffer.
func TestLocalPacketSize(t *testing.T) {
	def := memberlist.DefaultLocalConfig().UDPBufferSize
	for _, c := range []struct {
		local bool
		world int
		want  int
	}{{true, 64, localPacketSize}, {true, maxCompoundWorld, localPacketSize}, {true, maxCompoundWorld + 1, def}, {false, 64, memberlist.DefaultLANConfig().UDPBufferSize}} {
		cl := &Cluster{cfg: Config{Meta: Meta{Job: testJob, World: c.world}, Bind: "127.0.0.1:0", Local: c.local}}
		mc, err := cl.memberlistConfig()
		if err != nil {
			t.Fatal(err)
		}
		if mc.UDPBufferSize != c.want {
			t.Errorf("Local %v, world %d: UDPBufferSize %d, want %d", c.local, c.world, mc.UDPBufferSize, c.want)
		}
	}
	// Beyond the size: a checksum header (5 bytes) and a length (2), a
	// label of up to 255 bytes with its 2-byte header, and encryption's
	// version, nonce, tag and padding (at most 45 bytes).
	const around = 5 + 2 + 2 + 255 + 45
	if localPacketSize+around > min(65507, maxPacket) {
		t.Fatalf("a %d-byte packet can reach %d bytes, over the datagram limit %d", localPacketSize, localPacketSize+around, min(65507, maxPacket))
	}
}
