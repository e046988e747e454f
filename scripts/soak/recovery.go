package main

import (
	"time"
)

// Fault kinds, in the order the schedule cycles through them.
const (
	faultFollowerKill = "follower-kill"
	faultNATSRestart  = "nats-restart"
	faultFlood        = "hostile-flood"
	faultFollowerStop = "follower-stop"
	faultRank0Kill    = "rank0-kill"
)

var faultKinds = []string{faultFollowerKill, faultNATSRestart, faultFlood, faultFollowerStop, faultRank0Kill}

// reforms reports whether a fault of this kind makes the world re-form:
// a lost rank does; a NATS restart or a flood must not.
func reforms(kind string) bool {
	return kind == faultFollowerKill || kind == faultFollowerStop || kind == faultRank0Kill
}

// faultRecord is one fault as injected.
type faultRecord struct {
	Kind   string    `json:"kind"`
	Target string    `json:"target"`
	At     time.Time `json:"at"`  // the fault (kill, SIGSTOP, server kill, first hostile message)
	End    time.Time `json:"end"` // the injection done: restarted, SIGCONT sent, flood sent
	Detail string    `json:"detail,omitempty"`
	// Skipped says why a scheduled fault was not injected.
	Skipped string `json:"skipped,omitempty"`
}

// rankState is one rank's answer in a status poll.
type rankState struct {
	Rank   int    `json:"rank"`
	State  string `json:"state"`
	Epoch  uint32 `json:"epoch"`
	Step   uint64 `json:"step"`
	Rows   int    `json:"rows"`
	Member string `json:"member"`
	Digest string `json:"digest"`
}

// statusPoll is one status round: the ranks that answered.
type statusPoll struct {
	T     time.Time   `json:"t"`
	Ranks []rankState `json:"ranks"`
	Err   string      `json:"err,omitempty"`
}

// worldKey identifies a formed world: rank 0's member (a restarted rank 0
// starts over at epoch 0 under a new name) and its epoch.
type worldKey struct {
	Rank0 string
	Epoch uint32
}

// serving reports whether every rank of the world answered, ready or
// running, in one epoch, and which world that is.
func (p *statusPoll) serving(world int) (worldKey, bool) {
	if len(p.Ranks) != world {
		return worldKey{}, false
	}
	var k worldKey
	for i, r := range p.Ranks {
		if r.Rank != i || (r.State != "ready" && r.State != "running") || r.Epoch != p.Ranks[0].Epoch {
			return worldKey{}, false
		}
	}
	k.Rank0, k.Epoch = p.Ranks[0].Member, p.Ranks[0].Epoch
	return k, true
}

// recovery is how long the job took to serve again after one fault; a
// negative time: not before the next fault (or the end).
type recovery struct {
	Fault faultRecord `json:"fault"`
	// NextOK: until any request finished normally; NextNewOK: until one
	// sent after the fault did; World: until every rank was serving, once
	// the injection ended, in a new world if the fault re-forms it.
	NextOKMs    float64  `json:"next_ok_ms"`
	NextNewOKMs float64  `json:"next_new_ok_ms"`
	WorldMs     float64  `json:"world_ms"`
	Before      worldKey `json:"before"`
	After       worldKey `json:"after"`
}

// recoveries measures every injected fault, each up to the next one (or
// until, the end of the run).
func recoveries(faults []faultRecord, recs []reqRecord, polls []statusPoll, world int, until time.Time) []recovery {
	var injected []faultRecord
	for _, f := range faults {
		if f.Skipped == "" {
			injected = append(injected, f)
		}
	}
	out := make([]recovery, 0, len(injected))
	for i, f := range injected {
		limit := until
		if i+1 < len(injected) {
			limit = injected[i+1].At
		}
		rv := recovery{Fault: f, NextOKMs: -1, NextNewOKMs: -1, WorldMs: -1}
		rv.NextOKMs, rv.NextNewOKMs = nextOK(recs, f.At, limit)
		rv.Before, rv.After, rv.WorldMs = worldBack(polls, f, world, limit)
		out = append(out, rv)
	}
	return out
}

// nextOK is the time from at to the first request that finished normally
// after it (any, and one sent after at), before limit; -1 if none.
func nextOK(recs []reqRecord, at, limit time.Time) (anyMs, newMs float64) {
	anyMs, newMs = -1, -1
	for i := range recs {
		r := &recs[i]
		if !r.ok() || !r.Done.After(at) || !r.Done.Before(limit) {
			continue
		}
		ms := msSince(at, r.Done)
		if anyMs < 0 || ms < anyMs {
			anyMs = ms
		}
		if r.Sent.After(at) && (newMs < 0 || ms < newMs) {
			newMs = ms
		}
	}
	return anyMs, newMs
}

// worldBack finds the world before the fault and the first poll after
// the injection ended (before limit) where every rank serves, in another
// world if the fault re-forms it; the time is counted from the fault.
func worldBack(polls []statusPoll, f faultRecord, world int, limit time.Time) (before, after worldKey, ms float64) {
	for i := range polls {
		if k, ok := polls[i].serving(world); ok && polls[i].T.Before(f.At) {
			before = k
		}
	}
	from := f.At
	if f.End.After(from) {
		from = f.End
	}
	for i := range polls {
		p := &polls[i]
		if !p.T.After(from) || !p.T.Before(limit) {
			continue
		}
		k, ok := p.serving(world)
		if ok && (!reforms(f.Kind) || k != before) {
			return before, k, msSince(f.At, p.T)
		}
	}
	return before, worldKey{}, -1
}

func msSince(from, to time.Time) float64 { return float64(to.Sub(from)) / float64(time.Millisecond) }

// errorsByFault counts the requests that did not finish normally by cause
// and by the last fault injected before they ended ("" before any).
func errorsByFault(recs []reqRecord, faults []faultRecord) map[string]map[string]int {
	out := map[string]map[string]int{}
	for i := range recs {
		r := &recs[i]
		if r.ok() {
			continue
		}
		kind := ""
		for _, f := range faults {
			if f.Skipped == "" && !f.At.After(r.Done) {
				kind = f.Kind
			}
		}
		cause := classify(r.errorText(), r.TimedOut)
		if out[cause] == nil {
			out[cause] = map[string]int{}
		}
		out[cause][kind]++
	}
	return out
}
