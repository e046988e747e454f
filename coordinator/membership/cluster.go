package membership

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/tpcoord/tpcoord/internal/fielderr"
)

// Errors that Rendezvous and Events report; test with errors.Is.
var (
	ErrRendezvousTimeout = errors.New("rendezvous timed out")
	ErrRankTaken         = errors.New("rank already claimed")
)

// DefaultClaimWait is Config.ClaimWait's default.
const DefaultClaimWait = 15 * time.Second

// Config configures one member.
type Config struct {
	Meta Meta
	// Bind is the memberlist address, host:port; port 0 picks a free one.
	Bind string
	// Join lists peers to join (host:port); empty for the first member.
	Join []string
	// Local selects memberlist's fast loopback timings instead of LAN ones.
	Local bool
	// Transport overrides the network (memberlist's MockNetwork in tests).
	Transport memberlist.Transport
	// Failure detector tuning; zero keeps the LAN or local default.
	ProbeInterval, ProbeTimeout, GossipInterval time.Duration
	SuspicionMult                               int
	// ClaimWait is how long a member whose rank is held by another keeps
	// trying before it gives up with ErrRankTaken: the holder may be a
	// dead process that membership has not declared dead yet (a rank
	// restarted quickly after a crash). Default 15s.
	ClaimWait time.Duration
	// GossipKeys encrypts and authenticates gossip: the first key seals
	// what this member sends, any of them opens what it receives, and
	// unsealed messages are dropped. Members that share no key cannot
	// join each other. Empty: gossip in the clear.
	GossipKeys GossipKeys
	Logger     *slog.Logger
}

// Member is one member as this agent sees it.
type Member struct {
	Name string
	Addr string
	Meta Meta
}

// Event says a peer that was part of the world is gone.
type Event struct {
	Member Member
	Left   bool // it left on purpose (graceful shutdown) rather than failed
}

func (e Event) String() string {
	how := "failed"
	if e.Left {
		how = "left"
	}
	return fmt.Sprintf("rank %d (%s at %s) %s", e.Member.Meta.Rank, e.Member.Name, e.Member.Addr, how)
}

// Cluster is one agent's membership.
type Cluster struct {
	cfg  Config
	log  *slog.Logger
	ml   *memberlist.Memberlist
	meta []byte

	joined  chan struct{} // signalled (cap 1) when a member joins
	changes chan struct{} // the same, for Changes
	events  chan Event

	metas *metaCache // peers' decoded metadata

	name  string        // this member's unique name
	addr  string        // host:port peers reach this member at
	quiet time.Duration // the wait for gossip before a state exchange (gossipProgress)

	mu         sync.Mutex
	alive      map[string]Member // live members by name, kept by the delegate
	formed     bool              // rendezvous complete: losses become events
	didJoin    bool              // a Join reached at least one peer
	refusalLog []string          // the first members refused, for error messages
	refusal    error             // fatal: this member may not be part of the job
	refusals   map[string]bool
	world      map[int]Member  // ranks of the formed world
	seen       map[string]bool // addresses of the members ever seen (but this one)

	leaveOnce sync.Once
	leaveErr  error
}

// Start creates the member and binds its sockets. It does not join yet.
func Start(cfg Config) (*Cluster, error) {
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if cfg.ClaimWait <= 0 {
		cfg.ClaimWait = DefaultClaimWait
	}
	if cfg.Meta.Started == 0 {
		cfg.Meta.Started = time.Now().UnixNano()
	}
	meta, err := cfg.Meta.encode()
	if err != nil {
		return nil, err
	}
	c := &Cluster{
		cfg: cfg, log: logger.With("component", "membership"), meta: meta,
		joined: make(chan struct{}, 1), changes: make(chan struct{}, 1), events: make(chan Event, 64),
		refusals: map[string]bool{}, world: map[int]Member{}, alive: map[string]Member{}, seen: map[string]bool{},
		metas: newMetaCache(metaCacheSize(cfg.Meta.World)),
	}
	mc, err := c.memberlistConfig()
	if err != nil {
		return nil, err
	}
	if mc.Transport == nil {
		s, err := newSockets(mc.BindAddr, mc.BindPort, c.log)
		if err != nil {
			return nil, fielderr.New("Bind", "%w", err)
		}
		mc.Transport, mc.BindPort, mc.AdvertisePort = s, s.port(), s.port()
	}
	ml, err := memberlist.Create(mc)
	if err != nil {
		if s, ok := mc.Transport.(*sockets); ok {
			_ = s.Shutdown() // memberlist leaves a transport it did not make
		}
		return nil, fmt.Errorf("start memberlist on %s: %w", cfg.Bind, err)
	}
	c.ml = ml
	c.quiet = min(quietGossipRounds*mc.GossipInterval, maxQuiet)
	// Read once, before any peer exists: memberlist rewrites its local
	// node (on refutes and updates) under a lock callers cannot take.
	n := ml.LocalNode()
	c.addr = net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port)))
	return c, nil
}

// memberlistConfig is memberlist's configuration for this member: the LAN
// or loopback profile, the tuning, the key, and the transport (or the
// bind address).
func (c *Cluster) memberlistConfig() (*memberlist.Config, error) {
	cfg := c.cfg
	mc := memberlist.DefaultLANConfig()
	if cfg.Local {
		mc = memberlist.DefaultLocalConfig()
		// Compression buys nothing on loopback, and memberlist's LZW
		// allocates a 64 KiB table per gossip packet: a job of many ranks
		// on few cores spent a tenth of its start-up CPU on it. Members
		// decode compressed messages whatever their own setting.
		mc.EnableCompression = false
		mc.UDPBufferSize = packetSize(cfg.Meta.World, mc.UDPBufferSize)
	}
	if cfg.ProbeInterval > 0 {
		mc.ProbeInterval = cfg.ProbeInterval
	}
	if cfg.ProbeTimeout > 0 {
		mc.ProbeTimeout = cfg.ProbeTimeout
	}
	if cfg.SuspicionMult > 0 {
		mc.SuspicionMult = cfg.SuspicionMult
	}
	if cfg.GossipInterval > 0 {
		mc.GossipInterval = cfg.GossipInterval
	}
	mc.Name = fmt.Sprintf("%s-r%d-%x", cfg.Meta.Job, cfg.Meta.Rank, uint32(cfg.Meta.Started))
	c.name = mc.Name
	mc.Label = cfg.Meta.Job
	mc.Delegate = (*delegate)(c)
	mc.Events = (*delegate)(c)
	mc.Alive = (*delegate)(c)
	mc.Logger = log.New(levelWriter{c.log}, "", 0)
	mc.DeadNodeReclaimTime = time.Second
	if err := c.setKeyring(mc); err != nil {
		return nil, err
	}
	if cfg.Transport != nil {
		mc.Transport = cfg.Transport
		return mc, nil
	}
	host, port, err := splitHostPort(cfg.Bind)
	if err != nil {
		return nil, fielderr.New("Bind", "%w", err)
	}
	mc.BindAddr, mc.BindPort, mc.AdvertisePort = host, port, port
	return mc, nil
}

// setKeyring gives memberlist the gossip keys, if any, and makes it drop
// every message that is not sealed with one (both directions).
func (c *Cluster) setKeyring(mc *memberlist.Config) error {
	keys := c.cfg.GossipKeys
	if len(keys) == 0 {
		return nil
	}
	if err := keys.validate(); err != nil {
		return err
	}
	ring, err := memberlist.NewKeyring(keys, keys[0])
	if err != nil {
		return fielderr.New("GossipKeys", "%w", err)
	}
	mc.Keyring = ring
	mc.GossipVerifyIncoming, mc.GossipVerifyOutgoing = true, true
	return nil
}

func splitHostPort(s string) (string, int, error) {
	host, p, err := net.SplitHostPort(s)
	if err != nil {
		return "", 0, fmt.Errorf("%q: %w", s, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("%q: port must be 0..65535", s)
	}
	if host == "" {
		host = "0.0.0.0"
	}
	return host, port, nil
}

// Addr is the address other members reach this one at.
func (c *Cluster) Addr() string { return c.addr }

// Name is this member's unique name.
func (c *Cluster) Name() string { return c.name }

// Changes is signalled (coalesced) whenever a member joins, changes its
// metadata or leaves.
func (c *Cluster) Changes() <-chan struct{} { return c.changes }

// Events reports peers of the formed world that died or left. It is
// buffered; the cluster never blocks on it.
func (c *Cluster) Events() <-chan Event { return c.events }

// Members returns the live members, ordered by rank.
//
// It works from the delegate's copy rather than memberlist's Members():
// those are pointers into memberlist's node map, which its goroutines
// rewrite (meta, address) under a lock the caller does not hold.
func (c *Cluster) Members() []Member {
	c.mu.Lock()
	out := make([]Member, 0, len(c.alive))
	for _, m := range c.alive {
		out = append(out, m)
	}
	c.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Meta.Rank != out[j].Meta.Rank {
			return out[i].Meta.Rank < out[j].Meta.Rank
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// Rendezvous joins the peers (retrying with backoff) and waits until ranks
// 0..W-1 are all present, logging progress. On timeout (ctx) the error
// names the missing ranks and the peers reached.
func (c *Cluster) Rendezvous(ctx context.Context) ([]Member, error) {
	return c.form(ctx, nil)
}

// Reform waits, after a peer was lost, until ranks 0..W-1 are all present
// again (a restarted rank rejoins under a new name) and cond, if not nil,
// holds for them; the world is then formed anew and later losses are
// events again.
func (c *Cluster) Reform(ctx context.Context, cond func([]Member) bool) ([]Member, error) {
	c.mu.Lock()
	c.formed = false
	clear(c.world)
	c.mu.Unlock()
	return c.form(ctx, cond)
}

func (c *Cluster) form(ctx context.Context, cond func([]Member) bool) ([]Member, error) {
	f := &formation{world: c.cfg.Meta.World, backoff: firstJoinRetry, start: time.Now(), retry: time.NewTimer(0), missing: -1}
	if c.hasJoined() { // a Reform, or a member with no one to join: no join to retry
		f.backoff = rejoinBackoff
	}
	defer f.retry.Stop()
	progress := time.NewTicker(2 * time.Second)
	defer progress.Stop()
	for {
		if err := c.checkClaim(f); err != nil {
			return nil, err
		}
		present := c.Members()
		missing := missingRanks(present, f.world)
		c.gossipProgress(f, len(missing))
		twice := claimedTwice(present)
		if len(missing) == 0 && len(twice) == 0 && c.hasJoined() && (cond == nil || cond(present)) {
			c.setFormed(present)
			c.log.Info("world formed", "world_size", f.world, "took", time.Since(f.start).Round(time.Millisecond))
			return present, nil
		}
		select {
		case <-ctx.Done():
			if f.lastRefusal != nil {
				return nil, f.lastRefusal
			}
			return nil, c.timeoutError(present, f.world, f.joinErr)
		case <-c.joined:
		case <-f.retry.C:
			c.rejoin(f, missing)
		case <-progress.C:
			switch {
			case len(missing) > 0:
				c.log.Info("waiting for ranks", "present", len(present), "expected", f.world, "missing", missing)
			case len(twice) > 0:
				c.log.Info("waiting for the older of two members claiming a rank to go", "ranks", twice)
			default:
				c.log.Info("waiting for the world to re-form", "present", len(present))
			}
		}
	}
}

// formation is one Rendezvous's or Reform's progress.
type formation struct {
	world                int
	backoff              time.Duration // the next pause after a failed join
	start                time.Time
	retry                *time.Timer // the next join or resync
	joinErr, lastRefusal error
	seedTurn             int // the next seed to rejoin while ranks are missing
	missing              int // ranks missing at the last look (-1: none yet)
}

// firstJoinRetry is the pause after a first failed join. A refused
// connection fails at once, and ranks started together (launch) often try
// before their seed, rank 0, listens: retry soon, then back off.
const firstJoinRetry = 25 * time.Millisecond

// rejoinBackoff is the first pause between state exchanges of a member
// that had joined before the formation began (a Reform, or rank 0).
const rejoinBackoff = 100 * time.Millisecond

// quietGossipRounds is how many gossip intervals a member that has joined
// waits without news of a missing rank before it asks a seed for its
// state, but no longer than maxQuiet: a member that missed a join hears
// nothing more of it, however slow the gossip is set.
const (
	quietGossipRounds = 3
	maxQuiet          = time.Second
)

// packetSize is memberlist's UDPBufferSize for a world of members all on
// this host (Config.Local), given memberlist's default def. A datagram
// there is not bound by an Ethernet MTU, so a gossip packet can carry
// every queued update instead of the few that fit in 1400 bytes: at 64
// ranks each rank has 63 joins to pass on, and a start waited on them.
//
// memberlist subtracts its label and encryption overheads from the size;
// what it adds beyond (a 5-byte checksum header, a 2-byte length) stays
// far within loopback's 65507-byte datagram and sockets' maxPacket. It
// also piggybacks queued updates on each ping, ack and nack, as a compound
// message whose count is one byte: with at most one queued update per
// member, a world of more than maxCompoundWorld could overflow it in a
// large packet, so such worlds keep def.
func packetSize(world, def int) int {
	if world > maxCompoundWorld {
		return def
	}
	return localPacketSize
}

// localPacketSize is packetSize's large packet; maxCompoundWorld the
// largest world that gets it (updates of the other members, this one's,
// and the ping itself stay within a compound message's 255 parts).
const (
	localPacketSize  = 60000
	maxCompoundWorld = 250
)

// gossipProgress times the next state exchange from the last missing rank
// that gossip brought: once the member has joined, each rank that arrives
// sets the wait to c.quiet and resets the backoff. Gossip hands a join to
// a few random members a few times (memberlist's RetransmitMult × log10 of
// the members: twice in a local job of up to 8), so some members miss
// some joins; they are the ones that ask, c.quiet after the last join they
// heard of, instead of a second after their own join.
func (c *Cluster) gossipProgress(f *formation, missing int) {
	arrived := f.missing >= 0 && missing < f.missing
	f.missing = missing
	if arrived && missing > 0 && c.hasJoined() {
		f.backoff = c.quiet
		f.retry.Reset(c.quiet)
	}
}

// checkClaim returns a refusal that ends the formation. A rank held by
// another member is not one until ClaimWait has passed: the holder may be
// dead but not yet declared so, and the join is tried again.
func (c *Cluster) checkClaim(f *formation) error {
	err := c.refused()
	if err == nil {
		return nil
	}
	if !errors.Is(err, ErrRankTaken) || time.Since(f.start) >= c.cfg.ClaimWait {
		return err
	}
	f.lastRefusal = err
	c.log.Warn("rank is held by another member; retrying in case it is a dead one", "err", err, "gives_up_in", (c.cfg.ClaimWait - time.Since(f.start)).Round(time.Second))
	c.mu.Lock()
	c.refusal, c.didJoin = nil, false
	c.mu.Unlock()
	f.retry.Reset(time.Second)
	return nil
}

// setFormed records the formed world. Events queued before this formation
// are about an earlier world; they are dropped under the lock, so any event
// from now on is about this one and reaches the caller.
func (c *Cluster) setFormed(present []Member) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.events) > 0 {
		<-c.events
	}
	c.formed = true
	for _, m := range present {
		c.world[m.Meta.Rank] = m
	}
}

// rejoin joins the peers if this member has not yet, with backoff. Once
// joined it looks again after c.quiet (later while gossip brings missing
// ranks: gossipProgress), and while ranks are missing it joins its seeds
// (the Join list) and every address a member was seen at, one per attempt,
// with backoff: gossip about a missing rank may have been lost, and a rank
// that restarted with no peers to join (rank 0, typically) is found only
// if someone joins it.
func (c *Cluster) rejoin(f *formation, missing []int) {
	if !c.hasJoined() {
		n, err := c.ml.Join(c.cfg.Join)
		if err == nil && n > 0 {
			c.mu.Lock()
			c.didJoin = true
			c.mu.Unlock()
			f.backoff = c.quiet
			f.retry.Reset(c.quiet)
			return
		}
		f.joinErr = err
		c.log.Debug("join failed, retrying", "peers", c.cfg.Join, "err", err, "backoff", f.backoff)
		f.retry.Reset(f.backoff)
		f.backoff = min(2*f.backoff, 2*time.Second)
		return
	}
	if len(missing) == 0 {
		f.retry.Reset(time.Second)
		return
	}
	// One seed per attempt, in turn: a join waits out its TCP timeout on a
	// host that is gone, and this loop must not stall on each of them.
	if peers := c.seeds(); len(peers) > 0 {
		peer := peers[f.seedTurn%len(peers)]
		f.seedTurn++
		if _, err := c.ml.Join([]string{peer}); err != nil {
			c.log.Debug("rejoining a seed while ranks are missing", "peer", peer, "missing", missing, "err", err)
		}
	}
	f.backoff = min(2*f.backoff, 2*time.Second)
	f.retry.Reset(f.backoff)
}

// seeds are the addresses to join while ranks are missing: the Join list
// and every address a member was seen at but no member is alive at now.
func (c *Cluster) seeds() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	live := map[string]bool{}
	for _, m := range c.alive {
		live[m.Addr] = true
	}
	out := slices.Clone(c.cfg.Join)
	for addr := range c.seen {
		if !live[addr] && !slices.Contains(out, addr) {
			out = append(out, addr)
		}
	}
	sort.Strings(out)
	return out
}

func (c *Cluster) hasJoined() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.didJoin || len(c.cfg.Join) == 0
}

// UpdateMeta changes this member's metadata, gossips it, and then
// exchanges full state with every other member. Gossip sends an update to
// a few members a few times; a member that joined meanwhile can miss it
// and learn it only at the next periodic state exchange (15–30 s later), as
// a rank restarted just as rank 0 announced its next epoch did.
func (c *Cluster) UpdateMeta(update func(*Meta), timeout time.Duration) error {
	return c.updateMeta(update, timeout, len(c.Members()))
}

// updateMeta is UpdateMeta exchanging state with at most limit others,
// chosen by exchangePeers.
func (c *Cluster) updateMeta(update func(*Meta), timeout time.Duration, limit int) error {
	c.mu.Lock()
	update(&c.cfg.Meta)
	b, err := c.cfg.Meta.encode()
	if err == nil {
		c.meta = b
	}
	c.mu.Unlock()
	if err != nil {
		return err
	}
	gossipErr := c.ml.UpdateNode(timeout)
	c.mu.Lock()
	self := c.cfg.Meta.Rank
	c.mu.Unlock()
	peers := exchangePeers(c.Members(), c.name, self, limit)
	var syncErr error
	if len(peers) > 0 {
		n, err := c.ml.Join(peers)
		syncErr = exchangeErr(n, len(peers), err)
	}
	return errors.Join(gossipErr, syncErr)
}

// exchangePeers lists the addresses of at most limit members other than
// self (named name, of rank rank): rank 0 first, then the ranks after
// rank in a ring, so that the members a departure is handed to are spread
// over the world, and members of no rank order last.
func exchangePeers(members []Member, name string, rank, limit int) []string {
	world := 1
	for _, m := range members {
		world = max(world, m.Meta.Rank+1, m.Meta.World)
	}
	dist := func(m Member) int {
		switch r := m.Meta.Rank; {
		case r == 0:
			return 0
		case r < 0 || r >= world:
			return world + 1
		default:
			return (r-rank+world)%world + 1
		}
	}
	others := make([]Member, 0, len(members))
	for _, m := range members {
		if m.Name != name {
			others = append(others, m)
		}
	}
	slices.SortStableFunc(others, func(a, b Member) int { return cmp.Compare(dist(a), dist(b)) })
	peers := make([]string, 0, min(limit, len(others)))
	for _, m := range others[:min(limit, len(others))] {
		peers = append(peers, m.Addr)
	}
	return peers
}

// exchangeErr says how a state exchange with total members went, when
// memberlist's Join reached only n of them: with its error, or without one
// (it counts the members it reached, not the addresses tried, and may fall
// short without an error). Nil when all were reached.
func exchangeErr(n, total int, err error) error {
	switch {
	case err != nil:
		return fmt.Errorf("state exchange with %d of %d members failed: %w", total-n, total, err)
	case n < total:
		return fmt.Errorf("state exchange reached %d of %d members", n, total)
	}
	return nil
}

// claimedTwice lists the ranks two live members claim: a process restarted
// while its old one is only suspected yet (a frozen or partitioned host).
// Until the old one is gone the rank is not settled: a world formed with
// either would lose it again (a member that joins after the old one became
// suspect never hears of it, so it cannot give way by itself).
func claimedTwice(present []Member) []int {
	seen := map[int]bool{}
	var twice []int
	for _, m := range present {
		if seen[m.Meta.Rank] && !slices.Contains(twice, m.Meta.Rank) {
			twice = append(twice, m.Meta.Rank)
		}
		seen[m.Meta.Rank] = true
	}
	slices.Sort(twice)
	return twice
}

func missingRanks(present []Member, world int) []int {
	have := make([]bool, world)
	for _, m := range present {
		if m.Meta.Rank >= 0 && m.Meta.Rank < world {
			have[m.Meta.Rank] = true
		}
	}
	var missing []int
	for r, ok := range have {
		if !ok {
			missing = append(missing, r)
		}
	}
	return missing
}

func (c *Cluster) timeoutError(present []Member, world int, joinErr error) error {
	var reached []string
	for _, m := range present {
		reached = append(reached, fmt.Sprintf("rank %d at %s", m.Meta.Rank, m.Addr))
	}
	err := fmt.Errorf("%w: missing ranks %v of world size %d; reached: %s; joined via %v",
		ErrRendezvousTimeout, missingRanks(present, world), world, strings.Join(reached, ", "), c.cfg.Join)
	c.mu.Lock()
	refused := slices.Clone(c.refusalLog)
	c.mu.Unlock()
	if len(refused) > 0 {
		err = fmt.Errorf("%w; members refused: %s", err, strings.Join(refused, "; "))
	}
	if joinErr != nil {
		hint := ""
		if strings.Contains(joinErr.Error(), "decrypt") || strings.Contains(joinErr.Error(), "encryption") || strings.Contains(joinErr.Error(), "label") {
			hint = " (do all members use the same --gossip-key-file and job?)"
		}
		err = fmt.Errorf("%w; last join error: %w%s", err, joinErr, hint)
	}
	return err
}

func (c *Cluster) refused() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.refusal
}

// Leave announces a graceful departure and stops the member. It is
// idempotent: memberlist panics on a Leave after Shutdown, and an agent's
// shutdown paths (signal, deferred teardown) may both call it.
func (c *Cluster) Leave(timeout time.Duration) error {
	c.leaveOnce.Do(func() {
		c.announceLeaving(timeout)
		c.leaveErr = c.ml.Leave(timeout)
		if serr := c.ml.Shutdown(); c.leaveErr == nil {
			c.leaveErr = serr
		}
	})
	return c.leaveErr
}

// Abandon leaves without announcing a graceful departure: peers see this
// member as failed. Used when the agent stops because of an error.
func (c *Cluster) Abandon(timeout time.Duration) error {
	c.leaveOnce.Do(func() {
		c.leaveErr = c.ml.Leave(timeout)
		if serr := c.ml.Shutdown(); c.leaveErr == nil {
			c.leaveErr = serr
		}
	})
	return c.leaveErr
}

// leaveExchanges bounds the members a leaving member hands its departure
// to in a state exchange. When a whole job stops, every member leaves at
// once: exchanging with all the others made N·(N-1) full-state exchanges,
// some 4,000 at 64 ranks, which on a small host outlasted the stop grace
// and set off false suspicions.
const leaveExchanges = 8

// announceLeaving re-advertises this member's metadata with State
// MetaLeaving, gossips it and hands it to rank 0 and the next ranks in a
// state exchange (at most leaveExchanges), so that peers see the departure
// that follows as a leave, not a failure. Gossip alone can lose the race
// with the leave itself on a loaded host; the exchange is synchronous. The
// members beyond the exchange learn it from the gossip and from the
// stopping phase of this rank's last heartbeat on the bus.
func (c *Cluster) announceLeaving(timeout time.Duration) {
	if err := c.updateMeta(func(m *Meta) { m.State = MetaLeaving }, timeout, leaveExchanges); err != nil {
		c.log.Debug("leaving announcement not confirmed", "err", err)
	}
}

func (c *Cluster) ownMeta() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.meta
}

// delegate implements memberlist's Delegate, EventDelegate and
// AliveDelegate for a Cluster. memberlist calls these on its own
// goroutines; none blocks.
type delegate Cluster

func (d *delegate) NodeMeta(limit int) []byte {
	meta := (*Cluster)(d).ownMeta()
	if len(meta) > limit {
		return nil
	}
	return meta
}
func (d *delegate) NotifyMsg([]byte)                           {}
func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d *delegate) LocalState(join bool) []byte                { return nil }
func (d *delegate) MergeRemoteState(buf []byte, join bool)     {}

// NotifyAlive refuses members that do not belong to this job's world.
// memberlist calls it with its node lock held: it must not call back into
// the Memberlist, so it works from c.alive.
func (d *delegate) NotifyAlive(peer *memberlist.Node) error {
	c := (*Cluster)(d)
	if peer.Name == c.name || bytes.Equal(peer.Meta, c.ownMeta()) {
		return nil // ourselves
	}
	m, err := c.metas.decode(peer.Meta)
	if err != nil {
		return c.refuse(peer, err)
	}
	c.mu.Lock()
	own := c.cfg.Meta // UpdateMeta writes it under c.mu
	c.mu.Unlock()
	switch {
	case m.Job != own.Job:
		return c.refuse(peer, fmt.Errorf("it serves job %q, this member serves job %q", m.Job, own.Job))
	case m.Proto != own.Proto:
		return c.refuse(peer, fmt.Errorf("incompatible protocol version: %s (rank %d, tpcoord %s) speaks wire protocol %d, this member (rank %d, tpcoord %s) speaks %d",
			peer.Name, m.Rank, m.Version, m.Proto, own.Rank, own.Version, own.Proto))
	case m.World != own.World:
		return c.refuse(peer, fmt.Errorf("world size mismatch: %s has world size %d, this member (rank %d) has %d", peer.Name, m.World, own.Rank, own.World))
	case m.Digest != own.Digest:
		return c.refuse(peer, fmt.Errorf("config digest mismatch: %s (rank %d) has %s, this member (rank %d) has %s; compare vocab, executor and world size, and whether each has a job key file", peer.Name, m.Rank, m.Digest, own.Rank, own.Digest))
	case m.Rank < 0 || m.Rank >= own.World:
		return c.refuse(peer, fmt.Errorf("rank %d is outside world size %d", m.Rank, own.World))
	}
	if m.Rank == own.Rank && peer.Name != c.name {
		if older(m, peer.Name, own, c.name) {
			err := fmt.Errorf("%w: rank %d is held by %s at %s (started earlier); this member %s (bind %s) gives way",
				ErrRankTaken, own.Rank, peer.Name, peer.Address(), c.name, c.cfg.Bind)
			c.mu.Lock()
			if c.refusal == nil {
				c.refusal = err
			}
			c.mu.Unlock()
			c.signalJoin()
			return err
		}
		return c.refuse(peer, fmt.Errorf("%w: %s at %s claims rank %d, held by this member %s (bind %s)",
			ErrRankTaken, peer.Name, peer.Address(), own.Rank, c.name, c.cfg.Bind))
	}
	c.mu.Lock()
	var holder string
	for name, om := range c.alive {
		if name != peer.Name && om.Meta.Rank == m.Rank && older(om.Meta, name, m, peer.Name) {
			holder = name
		}
	}
	if holder != "" {
		// The holder may be dead and not yet declared so: a rank started
		// again on another address (launch binds port 0). Memberlist
		// drops a refused alive message; once the holder is gone, the
		// formation joins the claimant's address (seeds) rather than wait
		// for its next periodic state exchange, 15 to 30 s away.
		c.seen[peer.Address()] = true
	}
	c.mu.Unlock()
	if holder != "" {
		return c.refuse(peer, fmt.Errorf("%w: %s at %s claims rank %d, held by %s", ErrRankTaken, peer.Name, peer.Address(), m.Rank, holder))
	}
	return nil
}

// older reports whether claimant a (name an) came before b (name bn).
func older(a Meta, an string, b Meta, bn string) bool {
	if a.Started != b.Started {
		return a.Started < b.Started
	}
	return an < bn
}

// refuse logs a refusal once per peer and returns err for memberlist.
func (c *Cluster) refuse(peer *memberlist.Node, err error) error {
	c.mu.Lock()
	first := !c.refusals[peer.Name]
	c.refusals[peer.Name] = true
	if first && len(c.refusalLog) < 8 {
		c.refusalLog = append(c.refusalLog, fmt.Sprintf("%s at %s: %v", peer.Name, peer.Address(), err))
	}
	c.mu.Unlock()
	if first {
		c.log.Warn("refusing member", "peer", peer.Name, "addr", peer.Address(), "reason", err)
	}
	return err
}

func (c *Cluster) signalJoin() {
	select {
	case c.joined <- struct{}{}:
	default:
	}
	select {
	case c.changes <- struct{}{}:
	default:
	}
}

func (d *delegate) NotifyJoin(n *memberlist.Node)   { (*Cluster)(d).track(n, true) }
func (d *delegate) NotifyUpdate(n *memberlist.Node) { (*Cluster)(d).track(n, true) }

func (c *Cluster) track(n *memberlist.Node, alive bool) {
	m, err := c.metas.decode(n.Meta)
	c.mu.Lock()
	if alive && err == nil {
		c.alive[n.Name] = Member{Name: n.Name, Addr: n.Address(), Meta: m}
		if n.Name != c.name {
			c.seen[n.Address()] = true
		}
	} else {
		delete(c.alive, n.Name)
	}
	c.mu.Unlock()
	c.signalJoin()
}

func (d *delegate) NotifyLeave(n *memberlist.Node) {
	c := (*Cluster)(d)
	c.track(n, false)
	m, err := c.metas.decode(n.Meta)
	if err != nil {
		return
	}
	c.mu.Lock()
	w, ok := c.world[m.Rank]
	formed := c.formed && ok && w.Name == n.Name
	c.mu.Unlock()
	if !formed {
		return
	}
	left := n.State == memberlist.StateLeft || m.State == MetaLeaving
	ev := Event{Member: Member{Name: n.Name, Addr: n.Address(), Meta: m}, Left: left}
	select {
	case c.events <- ev:
	default:
		c.log.Error("membership event dropped: queue full", "event", ev.String())
	}
}

// levelWriter turns memberlist's "[LEVEL] memberlist: ..." lines into slog
// records; DEBUG lines are dropped unless the logger is at debug level.
type levelWriter struct{ log *slog.Logger }

func (w levelWriter) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	level := slog.LevelInfo
	for prefix, l := range map[string]slog.Level{"[DEBUG]": slog.LevelDebug, "[INFO]": slog.LevelInfo, "[WARN]": slog.LevelWarn, "[ERR]": slog.LevelError} {
		if strings.HasPrefix(line, prefix) {
			level, line = l, strings.TrimSpace(strings.TrimPrefix(line, prefix))
			break
		}
	}
	w.log.Log(context.Background(), level, strings.TrimPrefix(line, "memberlist: "))
	return len(p), nil
}
