package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tpcoord/tpcoord/broadcast/api"
)

// slot is one scheduled fault, at an offset from the soak's start.
type slot struct {
	At   time.Duration
	Kind string
}

// schedule spreads faults evenly over [warmup, duration-cooldown), as many
// as fit gap apart (at least one), cycling through kinds.
func schedule(duration, warmup, cooldown, gap time.Duration, kinds []string) []slot {
	span := duration - warmup - cooldown
	if span <= 0 || gap <= 0 || len(kinds) == 0 {
		return nil
	}
	n := max(1, int(span/gap))
	every := span / time.Duration(n)
	out := make([]slot, n)
	for i := range out {
		out[i] = slot{At: warmup + time.Duration(i)*every, Kind: kinds[i%len(kinds)]}
	}
	return out
}

// faulter injects the scheduled faults into a job.
type faulter struct {
	job      *job
	mon      *monitor
	ev       *eventLog
	out      *jsonl
	hostile  *hostile
	stopFor  time.Duration // how long a follower stays SIGSTOPped
	natsDown time.Duration // how long the NATS server stays dead

	mu        sync.Mutex
	recs      []faultRecord
	followers int // faults aimed at a follower so far: picks the next one
}

// run injects every slot's fault at its time, after start. A fault waits
// for the job to serve after the previous one; if it does not by the next
// slot (or end, for the last), the fault is skipped and recorded so.
func (f *faulter) run(ctx context.Context, start, end time.Time, slots []slot) {
	var lastEnd time.Time
	for i, s := range slots {
		if sleepCtx(ctx, time.Until(start.Add(s.At))) != nil {
			return
		}
		limit := end
		if i+1 < len(slots) {
			limit = start.Add(slots[i+1].At)
		}
		var rec faultRecord
		if f.waitServing(ctx, lastEnd, limit) {
			rec = f.inject(ctx, s.Kind)
			lastEnd = rec.End
		} else {
			rec = faultRecord{Kind: s.Kind, At: time.Now(), End: time.Now(), Skipped: "the job was not serving again by the next slot"}
		}
		f.record(rec)
	}
}

// waitServing waits for a status poll made after since that shows every
// rank serving; false if none comes before limit.
func (f *faulter) waitServing(ctx context.Context, since, limit time.Time) bool {
	for time.Now().Before(limit) {
		p, _ := f.mon.lastPoll()
		if _, ok := p.serving(f.job.spec.world); ok && p.T.After(since) {
			return true
		}
		if sleepCtx(ctx, 200*time.Millisecond) != nil {
			return false
		}
	}
	return false
}

func (f *faulter) record(rec faultRecord) {
	f.out.write(&rec)
	f.mu.Lock()
	f.recs = append(f.recs, rec)
	f.mu.Unlock()
	e := event{Kind: "fault " + rec.Kind, Proc: rec.Target, Detail: rec.Detail}
	if rec.Skipped != "" {
		e.Detail = "skipped: " + rec.Skipped
	}
	e.T = rec.At
	f.ev.add(e)
}

func (f *faulter) results() []faultRecord {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]faultRecord(nil), f.recs...)
}

func (f *faulter) inject(ctx context.Context, kind string) faultRecord {
	switch kind {
	case faultFollowerKill:
		return f.killRestart(kind, f.nextFollower())
	case faultRank0Kill:
		return f.killRestart(kind, f.job.ranks[0])
	case faultNATSRestart:
		return f.natsRestart(ctx)
	case faultFollowerStop:
		return f.freeze(ctx, f.nextFollower())
	default:
		return f.flood(ctx)
	}
}

// nextFollower picks ranks 1..world-1 in turn.
func (f *faulter) nextFollower() *proc {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.followers++
	return f.job.ranks[1+(f.followers-1)%(len(f.job.ranks)-1)]
}

// killRestart SIGKILLs a rank and starts it again with the same command.
func (f *faulter) killRestart(kind string, p *proc) faultRecord {
	rec := faultRecord{Kind: kind, Target: p.name, At: time.Now()}
	pid, err := p.kill()
	if err != nil {
		rec.End, rec.Skipped = time.Now(), err.Error()
		return rec
	}
	err = p.start()
	rec.End = time.Now()
	newPID, _ := p.pid()
	rec.Detail = fmt.Sprintf("SIGKILL pid %d; started again with the same command as pid %d", pid, newPID)
	if err != nil {
		rec.Detail += "; restart failed: " + err.Error()
	}
	return rec
}

// natsRestart kills the NATS server and starts it again on the same port.
func (f *faulter) natsRestart(ctx context.Context) faultRecord {
	p := f.job.nats.p
	rec := faultRecord{Kind: faultNATSRestart, Target: p.name, At: time.Now()}
	pid, err := p.kill()
	if err != nil {
		rec.End, rec.Skipped = time.Now(), err.Error()
		return rec
	}
	_ = sleepCtx(ctx, f.natsDown)
	err = p.start()
	if err == nil {
		err = f.job.nats.waitUp(ctx, 30*time.Second)
	}
	rec.End = time.Now()
	newPID, _ := p.pid()
	rec.Detail = fmt.Sprintf("SIGKILL pid %d; down %v; started again on port %d as pid %d", pid, f.natsDown, f.job.nats.port, newPID)
	if err != nil {
		rec.Detail += "; restart failed: " + err.Error()
	}
	return rec
}

// freeze SIGSTOPs a follower, and SIGCONTs it stopFor later.
func (f *faulter) freeze(ctx context.Context, p *proc) faultRecord {
	rec := faultRecord{Kind: faultFollowerStop, Target: p.name, At: time.Now()}
	pid, _, err := p.signal(syscall.SIGSTOP, false)
	if err != nil {
		rec.End, rec.Skipped = time.Now(), err.Error()
		return rec
	}
	_ = sleepCtx(ctx, f.stopFor)
	_, _, err = p.signal(syscall.SIGCONT, false)
	rec.End = time.Now()
	rec.Detail = fmt.Sprintf("SIGSTOP pid %d for %v, then SIGCONT", pid, f.stopFor)
	if err != nil {
		rec.Detail += ": " + err.Error()
	}
	return rec
}

// flood runs a hostile flood, notes what the ranks counted as refused
// (status a second after the flood against status before it), then
// publishes the forged steps.
func (f *faulter) flood(ctx context.Context) faultRecord {
	bus := f.job.client("soak-flood-status")
	defer bus.close()
	_, before := pollStatus(ctx, bus, f.job.subj, f.job.spec.world)
	at, detail, err := f.hostile.flood(ctx)
	rec := faultRecord{Kind: faultFlood, Target: "bus", At: at, Detail: detail}
	if err != nil {
		rec.End, rec.Skipped = time.Now(), err.Error()
		return rec
	}
	_ = sleepCtx(ctx, time.Second)
	_, after := pollStatus(ctx, bus, f.job.subj, f.job.spec.world)
	rec.Detail += "; refused by the ranks a second later: " + rejectedDiff(before, after)
	if f.hostile.forged > 0 {
		rec.Detail += "; then " + f.hostile.forgeSteps(ctx)
	}
	rec.End = time.Now()
	return rec
}

// rejectedDiff is, per rank, how much each refusal counter grew between
// two status rounds; a rank whose member or epoch changed is said so
// (its counters started over).
func rejectedDiff(before, after []api.RankStatus) string {
	var parts []string
	for _, a := range after {
		i := slices.IndexFunc(before, func(b api.RankStatus) bool { return b.Rank == a.Rank })
		switch {
		case i < 0:
			parts = append(parts, fmt.Sprintf("rank %d: no status before", a.Rank))
		case before[i].Member != a.Member || before[i].Epoch != a.Epoch:
			parts = append(parts, fmt.Sprintf("rank %d: new member or epoch, %s", a.Rank, counters(a.Rejected)))
		default:
			grown := map[string]uint64{}
			for k, v := range a.Rejected {
				if d := v - before[i].Rejected[k]; d > 0 {
					grown[k] = d
				}
			}
			parts = append(parts, fmt.Sprintf("rank %d: %s", a.Rank, counters(grown)))
		}
	}
	if len(parts) == 0 {
		return "no status after the flood"
	}
	return strings.Join(parts, "; ")
}
