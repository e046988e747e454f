package main

import (
	"fmt"
	"slices"
)

// replayRecord is one seeded request run again on the fault-free job.
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

// comparison is the seeded requests of the soak against their replays.
type comparison struct {
	Seeded   int `json:"seeded"`
	Compared int `json:"compared"` // seeded, finished normally, replayed
	Matched  int `json:"matched"`  // same tokens and finish reason
	// Mismatches differ in tokens or finish reason. LogprobMismatches
	// have the same tokens but different logprobs; LogprobsIncomplete
	// too, but some of their streamed replies were lost (logprobs come
	// only in the streamed replies, which NATS delivers at most once).
	Mismatches         []mismatch `json:"mismatches"`
	LogprobMismatches  []mismatch `json:"logprob_mismatches"`
	LogprobsIncomplete []mismatch `json:"logprobs_incomplete"`
	// ExcludedErrored are seeded requests that did not finish normally in
	// the soak (their partial tokens are not compared).
	ExcludedErrored int `json:"excluded_errored"`
	Unseeded        int `json:"unseeded"`
	// ReplayFailed are requests whose replay itself failed or is missing.
	ReplayFailed []mismatch `json:"replay_failed"`
}

// toReplay lists the requests whose tokens are compared: seeded and
// finished normally.
func toReplay(recs []reqRecord) []reqRecord {
	var out []reqRecord
	for _, r := range recs {
		if r.seeded() && r.ok() {
			out = append(out, r)
		}
	}
	return out
}

// compareReplay compares every seeded request that finished normally with
// its replay.
func compareReplay(recs []reqRecord, replays map[int]replayRecord) comparison {
	var c comparison
	for i := range recs {
		r := &recs[i]
		switch {
		case !r.seeded():
			c.Unseeded++
			continue
		case !r.ok():
			c.Seeded++
			c.ExcludedErrored++
			continue
		}
		c.Seeded++
		rep, ok := replays[r.ID]
		switch {
		case !ok:
			c.ReplayFailed = append(c.ReplayFailed, mismatch{r.ID, "not replayed"})
		case rep.Error != "":
			c.ReplayFailed = append(c.ReplayFailed, mismatch{r.ID, "replay failed: " + rep.Error})
		default:
			c.Compared++
			c.judge(r, &rep)
		}
	}
	return c
}

func (c *comparison) judge(r *reqRecord, rep *replayRecord) {
	switch {
	case !slices.Equal(r.Tokens, rep.Tokens):
		c.Mismatches = append(c.Mismatches, mismatch{r.ID, tokenDiff(r.Tokens, rep.Tokens)})
	case r.Finish != rep.Finish:
		c.Mismatches = append(c.Mismatches, mismatch{r.ID, fmt.Sprintf("finish reason %q, replay %q", r.Finish, rep.Finish)})
	default:
		c.Matched++
	}
	switch {
	case r.Logprobs == rep.Logprobs || !slices.Equal(r.Tokens, rep.Tokens):
	case r.Stream.Missing > 0 || r.LogprobsMissing > 0:
		c.LogprobsIncomplete = append(c.LogprobsIncomplete, mismatch{r.ID,
			fmt.Sprintf("of %d tokens, %d token replies and %d logprobs replies lost", len(r.Tokens), r.Stream.Missing, r.LogprobsMissing)})
	default:
		c.LogprobMismatches = append(c.LogprobMismatches, mismatch{r.ID, "same tokens, different logprobs" + logprobDiff(r.TokenLogprob, rep.TokenLogprob)})
	}
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
