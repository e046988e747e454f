package main

import (
	"fmt"
	"slices"

	"github.com/tpcoord/tpcoord/coordinator/gateway"
)

// replayRecord is one request run again, with its seed, on the
// fault-free job.
type replayRecord struct {
	ID       int     `json:"id"`
	Tokens   []int32 `json:"tokens"`
	Finish   string  `json:"finish,omitempty"`
	Logprobs string  `json:"logprobs_fnv,omitempty"`
	// TokenLogprob: as in reqRecord.
	TokenLogprob []*float32 `json:"token_logprob,omitempty"`
	Error        string     `json:"error,omitempty"`
}

// mismatch is one request whose replay differs, and how.
type mismatch struct {
	ID   int    `json:"id"`
	What string `json:"what"`
}

// pathComparison counts the requests of one path (or of all) against
// their replays.
type pathComparison struct {
	Seeded int `json:"seeded"` // by the soak
	// GatewaySeeded had no seed from the soak: the gateway drew one and
	// reported it (gateway path only).
	GatewaySeeded int `json:"gateway_seeded"`
	Compared      int `json:"compared"` // with a seed, finished normally, replayed
	Matched       int `json:"matched"`  // same tokens and finish reason
	// ExcludedErrored did not finish normally in the soak (their partial
	// tokens are not compared).
	ExcludedErrored int `json:"excluded_errored"`
	// Unseeded are Go client requests without a seed: not reproducible.
	Unseeded int `json:"unseeded"`
}

// comparison is the soak's requests that had a seed against their
// replays: every path's counts, each path's, and what differed.
type comparison struct {
	pathComparison
	Paths map[string]*pathComparison `json:"paths"`
	// Mismatches differ in tokens or finish reason. LogprobMismatches
	// have the same tokens but different logprobs; LogprobsIncomplete
	// too, but some of their streamed replies were lost (logprobs come
	// only in the streamed replies, which NATS delivers at most once).
	Mismatches         []mismatch `json:"mismatches"`
	LogprobMismatches  []mismatch `json:"logprob_mismatches"`
	LogprobsIncomplete []mismatch `json:"logprobs_incomplete"`
	// ReplayFailed are requests whose replay itself failed or is missing.
	ReplayFailed []mismatch `json:"replay_failed"`
}

// count applies f to the totals and to path's counts.
func (c *comparison) count(path string, f func(*pathComparison)) {
	f(&c.pathComparison)
	if c.Paths == nil {
		c.Paths = map[string]*pathComparison{}
	}
	if c.Paths[path] == nil {
		c.Paths[path] = &pathComparison{}
	}
	f(c.Paths[path])
}

// allEqual reports whether every request with a seed that finished
// equals its replay: tokens, finish reason, logprobs.
func (c *comparison) allEqual() bool {
	return c.Matched == c.Compared && len(c.Mismatches) == 0 && len(c.LogprobMismatches) == 0 && len(c.ReplayFailed) == 0
}

// toReplay lists the requests whose tokens are compared: with a seed (the
// soak's or the gateway's) and finished normally.
func toReplay(recs []reqRecord) []reqRecord {
	var out []reqRecord
	for _, r := range recs {
		if r.replaySeed() != nil && r.ok() {
			out = append(out, r)
		}
	}
	return out
}

// compareReplay compares every request that finished normally with a
// seed with its replay.
func compareReplay(recs []reqRecord, replays map[int]replayRecord) comparison {
	var c comparison
	for i := range recs {
		r := &recs[i]
		switch {
		case r.seeded():
			c.count(r.Path, func(p *pathComparison) { p.Seeded++ })
		case r.Path == pathGateway:
			c.count(r.Path, func(p *pathComparison) { p.GatewaySeeded++ })
		default:
			c.count(r.Path, func(p *pathComparison) { p.Unseeded++ })
			continue
		}
		if !r.ok() {
			c.count(r.Path, func(p *pathComparison) { p.ExcludedErrored++ })
			continue
		}
		rep, ok := replays[r.ID]
		switch {
		case r.replaySeed() == nil:
			c.ReplayFailed = append(c.ReplayFailed, mismatch{r.ID, "finished without a " + gateway.SeedHeader + " header"})
		case r.seeded() && *r.replaySeed() != *r.Request.Seed:
			c.Mismatches = append(c.Mismatches, mismatch{r.ID, fmt.Sprintf("%s %d, but the request's seed is %d", gateway.SeedHeader, *r.replaySeed(), *r.Request.Seed)})
		case !ok:
			c.ReplayFailed = append(c.ReplayFailed, mismatch{r.ID, "not replayed"})
		case rep.Error != "":
			c.ReplayFailed = append(c.ReplayFailed, mismatch{r.ID, "replay failed: " + rep.Error})
		default:
			c.count(r.Path, func(p *pathComparison) { p.Compared++ })
			if c.judge(r, &rep) {
				c.count(r.Path, func(p *pathComparison) { p.Matched++ })
			}
		}
	}
	return c
}

// judge records how r differs from its replay; true: same tokens and
// finish reason.
func (c *comparison) judge(r *reqRecord, rep *replayRecord) (same bool) {
	switch {
	case !slices.Equal(r.Tokens, rep.Tokens):
		c.Mismatches = append(c.Mismatches, mismatch{r.ID, tokenDiff(r.Tokens, rep.Tokens)})
	case r.Finish != rep.Finish:
		c.Mismatches = append(c.Mismatches, mismatch{r.ID, fmt.Sprintf("finish reason %q, replay %q", r.Finish, rep.Finish)})
	default:
		same = true
	}
	switch {
	case r.Logprobs == rep.Logprobs || !slices.Equal(r.Tokens, rep.Tokens):
	case r.Stream.Missing > 0 || r.LogprobsMissing > 0:
		c.LogprobsIncomplete = append(c.LogprobsIncomplete, mismatch{r.ID,
			fmt.Sprintf("of %d tokens, %d token replies and %d logprobs replies lost", len(r.Tokens), r.Stream.Missing, r.LogprobsMissing)})
	default:
		c.LogprobMismatches = append(c.LogprobMismatches, mismatch{r.ID, "same tokens, different logprobs" + logprobDiff(r.TokenLogprob, rep.TokenLogprob)})
	}
	return same
}

// tokenDiff describes where two token lists first differ.
func tokenDiff(got, want []int32) string {
	n := min(len(got), len(want))
	for i := range n {
		if got[i] != want[i] {
			return fmt.Sprintf("token %d: soak %d, replay %d (lengths %d and %d)", i, got[i], want[i], len(got), len(want))
		}
	}
	return fmt.Sprintf("lengths differ: soak %d tokens, replay %d (equal up to %d)", len(got), len(want), n)
}

// logprobDiff says where two tokens' logprob lists first differ ("" if
// their tokens' own logprobs agree: the difference is in the top lists).
func logprobDiff(got, want []*float32) string {
	for i := range min(len(got), len(want)) {
		if (got[i] == nil) != (want[i] == nil) || got[i] != nil && *got[i] != *want[i] {
			return fmt.Sprintf(": token %d: soak %s, replay %s", i, fmtLogprob(got[i]), fmtLogprob(want[i]))
		}
	}
	return ""
}

func fmtLogprob(v *float32) string {
	if v == nil {
		return "none"
	}
	return fmt.Sprint(*v)
}
