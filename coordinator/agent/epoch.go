package agent

import (
	"context"
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/tpcoord/tpcoord/coordinator/membership"
	"github.com/tpcoord/tpcoord/internal/freeport"
)

// needsMasterPort reports whether this job's executor needs a rendezvous
// port for collectives of its own: a model worker may run torch.distributed.
func (c *Config) needsMasterPort() bool { return c.Executor == ExecutorWorker }

// pickMasterPort finds a TCP port, none of avoid, free on every interface
// for rank 0's runtime, which binds it itself when it starts (freeport
// says where it is picked; torch's store listens on every interface).
func pickMasterPort(avoid ...int) (int, error) {
	p, err := freeport.Pick("", false, avoid...)
	if err != nil {
		return 0, fmt.Errorf("pick a port for the model runtime's rendezvous: %w", err)
	}
	return p, nil
}

// epochInfo describes the epoch about to run from the members this agent
// sees: rank 0's address and rendezvous port, and the ranks on this host.
// A follower that learned of the epoch from rank 0's heartbeat may see
// rank 0's metadata for it a moment later: it waits for it, up to a few
// seconds, since the port is in it.
func (w *world) epochInfo(ctx context.Context) (EpochInfo, error) {
	cfg := &w.r.a.cfg
	e := EpochInfo{Epoch: w.epoch, Rank: cfg.Rank, World: cfg.WorldSize}
	deadline := time.Now().Add(5 * time.Second)
	for {
		members := w.r.cl.Members()
		rank0, ok := memberOfRank(members, 0)
		if ok && (!cfg.needsMasterPort() || rank0.Meta.Epoch == w.epoch) {
			e.MasterAddr, _, _ = net.SplitHostPort(rank0.Addr)
			e.MasterPort = rank0.Meta.MasterPort
			e.LocalRank, e.LocalWorld = localRanks(members, w.r.cl.Addr(), cfg.Rank)
			return e, nil
		}
		if time.Now().After(deadline) {
			return e, fmt.Errorf("rank 0 does not advertise epoch %d (the rendezvous port of its model runtime)", w.epoch)
		}
		select {
		case <-ctx.Done():
			return e, ctx.Err()
		case <-w.r.cl.Changes():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func memberOfRank(members []membership.Member, r int) (membership.Member, bool) {
	for _, m := range members {
		if m.Meta.Rank == r {
			return m, true
		}
	}
	return membership.Member{}, false
}

// localRanks is rank's index among the members on its host (addr's host),
// in rank order, and how many there are.
func localRanks(members []membership.Member, addr string, rank int) (local, n int) {
	host, _, _ := net.SplitHostPort(addr)
	var ranks []int
	for _, m := range members {
		if h, _, _ := net.SplitHostPort(m.Addr); h == host {
			ranks = append(ranks, m.Meta.Rank)
		}
	}
	slices.Sort(ranks)
	return max(0, slices.Index(ranks, rank)), max(1, len(ranks))
}
