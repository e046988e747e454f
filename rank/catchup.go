package rank

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/rank/core"
)

// rejectLogInterval limits logging of refused messages to one line per kind
// per interval; the counters in status hold the totals.
const rejectLogInterval = 10 * time.Second

// reject counts a refused message and logs it at most once per kind per
// interval. A message refused for its MAC (a forgery, or another job's
// key) counts as "mac", whatever its kind. Safe on any goroutine.
func (d *Driver) reject(kind string, err error, attrs ...any) {
	if errors.Is(err, broadcast.ErrMAC) {
		attrs = append(attrs, "message", kind)
		kind = "mac"
	}
	d.warnCounted(kind, "refused message", err, attrs...)
}

// warnCounted counts an event of kind and logs msg at most once per kind per
// interval, with the running total.
func (d *Driver) warnCounted(kind, msg string, err error, attrs ...any) {
	d.mu.Lock()
	d.rejected[kind]++
	n := d.rejected[kind]
	logNow := time.Since(d.lastWarn[kind]) >= rejectLogInterval
	if logNow {
		d.lastWarn[kind] = time.Now()
	}
	d.mu.Unlock()
	if logNow {
		d.log.Warn(msg, append([]any{"kind", kind, "err", err, "total", n}, attrs...)...)
	}
}

// count records a harmless event (such as a duplicate step) without logging.
func (d *Driver) count(kind string) {
	d.mu.Lock()
	d.rejected[kind]++
	d.mu.Unlock()
}

// onLeaderHeartbeat lets a follower notice that rank 0 has applied steps it
// never received (the last steps before a pause are otherwise never
// followed by a message that reveals the gap).
func (d *Driver) onLeaderHeartbeat(m *broadcast.Msg) {
	var hb broadcast.Heartbeat
	if err := d.codec.DecodeHeartbeat(m.Data, &hb); err != nil {
		d.reject("heartbeat", err, "subject", m.Subject)
		return
	}
	if hb.Rank != 0 {
		return
	}
	// The same rule as for steps: a follower that knows its rank 0's ID
	// refuses any other (a stale rank 0 of an earlier run would otherwise
	// keep it alive, or send it after steps that do not exist); one that
	// does not (Leader 0) accepts any and learns nothing from the wire.
	if !d.follows(hb.Leader) {
		d.reject("heartbeat_other_leader", fmt.Errorf("rank 0 heartbeat from leader %08x, rank 0 of this job is %08x", hb.Leader, d.cfg.Leader), "subject", m.Subject)
		return
	}
	if hb.Epoch > d.cfg.Epoch && d.cfg.Leader != 0 {
		// This rank's rank 0 has moved on (it re-formed the world and
		// this rank, new, adopted the epoch it advertised just before):
		// follow it now rather than when rank 0 seems silent.
		d.Abort(&EpochMovedError{Epoch: hb.Epoch, Was: d.cfg.Epoch})
		return
	}
	if hb.Epoch != d.cfg.Epoch {
		return
	}
	// Only steps rank 0 had applied a whole heartbeat interval ago count:
	// newer ones may still be on their way.
	d.mu.Lock()
	d.peerTab.HeardFrom(0, &hb, d.cfg.Clock())
	d.f.leader, d.f.leaderNow = d.f.leaderNow, max(d.f.leaderNow, hb.Applied)
	ahead := d.f.leader > d.pos.applied
	d.mu.Unlock()
	if ahead {
		select {
		case d.f.behind <- struct{}{}:
		default:
		}
	}
}

// EpochMovedError stops a follower whose rank 0 (the same leader) leads a
// later epoch: rank 0 re-formed the world, with this rank in it, and this
// rank had adopted the epoch rank 0 advertised just before. It is a peer
// loss (errors.Is ErrPeerLost); the agent can follow rank 0 into Epoch
// without waiting for the membership gossip to say so.
type EpochMovedError struct{ Epoch, Was uint32 }

func (e *EpochMovedError) Error() string {
	return fmt.Sprintf("%v: rank 0 is in epoch %d, this rank in %d", ErrPeerLost, e.Epoch, e.Was)
}

func (e *EpochMovedError) Unwrap() error { return ErrPeerLost }

// follows reports whether a message stamped with leader comes from the rank
// 0 this follower follows: DriverConfig.Leader, or any when that is 0.
func (d *Driver) follows(leader uint32) bool {
	return d.cfg.Leader == 0 || leader == d.cfg.Leader
}

func (d *Driver) leaderApplied() uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.f.leader
}

// onReplay serves a follower's replay request from the window (rank 0).
func (d *Driver) onReplay(m *broadcast.Msg) {
	var req broadcast.ReplayRequest
	if err := d.codec.DecodeReplayRequest(m.Data, &req); err != nil {
		d.reject("replay_request", err)
		return
	}
	if m.Reply == "" {
		return
	}
	rep := d.l.window.Serve(&req, d.cfg.MaxStepBytes)
	rep.Leader = d.cfg.Leader
	d.log.Info("replaying steps", "to_rank", req.Rank, "from", req.From, "to", req.To, "sent", len(rep.Steps), "status", rep.Status)
	_ = d.tr.Publish(&broadcast.Msg{Subject: m.Reply, Data: d.codec.AppendReplayReply(nil, rep)})
}

// replayBackoff is the pause after the first failed replay request; it
// doubles after each further one.
const replayBackoff = 100 * time.Millisecond

// catchUp asks rank 0 for the steps after the last applied one up to
// target and applies them in order. A step rank 0 no longer keeps ends the
// loop cleanly: this rank cannot rejoin lockstep.
func (d *Driver) catchUp(ctx context.Context, target uint64) error {
	// Five attempts, with pauses of 100, 200, 400 and 800 ms between them
	// (each at most ReplayTimeout).
	const attempts = 5
	var rep broadcast.ReplayReply
	tries := 0
	for d.mirror.Applied() < target {
		from := d.mirror.Applied() + 1
		err := d.requestReplay(ctx, from, target, &rep)
		var refused *refusedReply
		if errors.As(err, &refused) {
			// Another rank 0 (a stale one still subscribed to the job's
			// subjects) or a forger may answer first: its reply was
			// refused, whatever it said; ask again at once.
			if tries++; tries < attempts {
				continue
			}
			return fmt.Errorf("%w: rank %d missed steps %d..%d and rank 0 did not answer %d replay requests; the last reply: %w", ErrAborted, d.cfg.Rank, from, target, attempts, err)
		}
		var bad *replayError
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.As(err, &bad):
			return bad.err
		case err != nil:
			if tries++; tries >= attempts {
				return fmt.Errorf("%w: rank %d missed steps %d..%d and rank 0 did not answer %d replay requests: %w", ErrAborted, d.cfg.Rank, from, target, attempts, err)
			}
			if !d.replayPause(ctx, tries, from, target, err) {
				return nil
			}
			continue
		}
		if len(rep.Steps) == 0 {
			// Nothing past what we have: the step that suggested a gap was
			// not rank 0's (a forgery, or a stale leader's heartbeat).
			d.reject("bogus_gap", fmt.Errorf("rank 0 has not published steps %d..%d", from, target))
			return nil
		}
		d.count("replayed")
		if err := d.applyReplayed(ctx, rep.Steps); err != nil || ctx.Err() != nil {
			return err
		}
		tries = 0
	}
	return nil
}

// replayError is a replay answer that ends the catch-up for good (err is
// the loop's error), as opposed to one worth asking again.
type replayError struct{ err error }

func (e *replayError) Error() string { return e.err.Error() }

// refusedReply is a replay answer that did not come from this rank's rank
// 0: its MAC does not verify, or it names another leader. It is refused
// (and counted) and the request made again.
type refusedReply struct{ err error }

func (e *refusedReply) Error() string { return e.err.Error() }
func (e *refusedReply) Unwrap() error { return e.err }

// requestReplay asks rank 0 for steps from..to and decodes its answer into
// rep. A malformed or refusing answer is a *replayError, one that is not
// rank 0's a *refusedReply.
func (d *Driver) requestReplay(ctx context.Context, from, to uint64, rep *broadcast.ReplayReply) error {
	req := broadcast.ReplayRequest{Epoch: d.mirror.Epoch(), Rank: uint32(d.cfg.Rank), From: from, To: to}
	rctx, cancel := context.WithTimeout(ctx, d.cfg.ReplayTimeout)
	data, err := broadcast.Request(rctx, d.tr, d.subj.Replay(), d.codec.AppendReplayRequest(nil, &req))
	cancel()
	if err != nil {
		return err
	}
	if err := d.codec.DecodeReplayReply(data, rep); errors.Is(err, broadcast.ErrMAC) {
		d.reject("replay_reply", err)
		return &refusedReply{err}
	} else if err != nil {
		return &replayError{fmt.Errorf("%w: rank %d: malformed replay reply: %w", ErrAborted, d.cfg.Rank, err)}
	}
	if !d.follows(rep.Leader) {
		err := fmt.Errorf("replay reply from leader %08x, rank 0 of this job is %08x", rep.Leader, d.cfg.Leader)
		d.reject("replay_other_leader", err)
		return &refusedReply{err}
	}
	switch rep.Status {
	case broadcast.ReplayOK:
		return nil
	case broadcast.ReplayBeyondWindow:
		if d.mirror.Applied() == 0 {
			return &replayError{d.notInEpoch(to, rep.Oldest)}
		}
		return &replayError{fmt.Errorf("%w: rank %d missed steps %d..%d but rank 0 keeps only steps from %d (--replay-window): this rank fell too far behind", ErrAborted, d.cfg.Rank, from, to, rep.Oldest)}
	}
	return &replayError{fmt.Errorf("%w: rank %d: replay refused: rank 0 is in epoch %d, this rank in %d", ErrAborted, d.cfg.Rank, rep.Epoch, d.mirror.Epoch())}
}

// notInEpoch is the error of a follower that has applied nothing in its
// epoch and finds rank 0 at step to, no longer holding step 1: rank 0
// formed this epoch with another member for this rank (one that has just
// died, still listed by membership, and this process its restart), so
// this member is not in it. Rank 0 waits for its followers from step 1
// (MaxLag), so a member of the epoch cannot be this far behind. It wraps
// ErrPeerLost: under --on-peer-loss wait the agent waits for the next
// epoch, which rank 0 forms once it notices the member it lost.
func (d *Driver) notInEpoch(to, oldest uint64) error {
	return fmt.Errorf("%w: rank %d has no step of epoch %d, and rank 0 is at step %d keeping steps from %d: "+
		"rank 0 formed this epoch with another member for rank %d (this process started after it); waiting for the next epoch",
		ErrPeerLost, d.cfg.Rank, d.mirror.Epoch(), to, oldest, d.cfg.Rank)
}

// replayPause waits before replay attempt tries+1. "No responders" comes
// back at once, so without a pause every attempt would be spent in the
// moment rank 0 is resubscribing (after a NATS server restart, say). It
// reports false if ctx ended meanwhile.
func (d *Driver) replayPause(ctx context.Context, tries int, from, to uint64, err error) bool {
	wait := min(replayBackoff<<(tries-1), d.cfg.ReplayTimeout)
	d.log.Warn("replay request failed; retrying", "from", from, "to", to, "in", wait, "err", err)
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// applyReplayed applies replayed steps in order, skipping those already
// applied.
func (d *Driver) applyReplayed(ctx context.Context, steps [][]byte) error {
	var st broadcast.Step
	for _, b := range steps {
		if err := d.codec.DecodeStep(b, &st); err != nil {
			return fmt.Errorf("%w: rank %d: replayed step: %w", ErrAborted, d.cfg.Rank, err)
		}
		if !d.follows(st.Leader) {
			return fmt.Errorf("%w: rank %d: replayed step %d was published by leader %08x, rank 0 of this job is %08x", ErrAborted, d.cfg.Rank, st.Step, st.Leader, d.cfg.Leader)
		}
		if err := d.mirror.Check(&st); errors.Is(err, core.ErrDuplicate) {
			continue
		}
		if err := d.applyAndRun(ctx, &st); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
	}
	return nil
}
