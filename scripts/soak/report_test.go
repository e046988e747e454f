package main

import (
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tpcoord/tpcoord/broadcast/api"
)

func TestGroupErrors(t *testing.T) {
	recs := []reqRecord{
		{ID: 1, Finish: api.FinishLength},
		{ID: 2, Error: "rank 0: unavailable: rank 0 is waiting for the world to re-form after a peer loss (--on-peer-loss wait); retry later"},
		{ID: 3, Error: `waiting for tokens: rank 0 of job "soak" is gone: 4 keepalives in a row over 3s found nobody: request lost`},
		{ID: 4, Error: `waiting for tokens: rank 0 of job "soak" is gone: 8 keepalives in a row over 5s found nobody: request lost`},
		{ID: 5, Error: "rank 0: unavailable: rank 0 is waiting for the world to re-form after a peer loss (--on-peer-loss wait); retry later"},
		{ID: 6, Error: "rank 0: unavailable: rank 0 is waiting for the world to re-form after a peer loss (--on-peer-loss wait); retry later"},
		{ID: 7, Error: "rank 0: cancelled by the client", TimedOut: true},
		{ID: 8, Error: "rank 0: worker 1a2b3c4d5e6f7a8b failed at step 12 after 1.5s"},
		{ID: 9, Error: "rank 0: worker ffeeddccbbaa0099 failed at step 907 after 20ms"},
		{ID: 10, Finish: api.FinishCancelled}, // no error text, yet not finished
	}
	got := groupErrors(recs)
	want := []struct {
		cause string
		count int
		texts int
	}{
		{"unavailable: rank 0 is waiting for the world to re-form", 3, 1},
		{"rank 0 is gone (keepalives found nobody)", 2, 1},
		{"rank 0: worker <hex> failed at step <n> after <dur>", 2, 1},
		{"finish reason cancelled", 1, 1},
		{"timeout: no end within the soak's request deadline", 1, 1},
	}
	if len(got) != len(want) {
		t.Fatalf("%d groups, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		g := got[i]
		if g.Cause != w.cause || g.Count != w.count || len(g.Texts) != w.texts {
			t.Errorf("group %d: %q ×%d with %d texts, want %q ×%d with %d", i, g.Cause, g.Count, len(g.Texts), w.cause, w.count, w.texts)
		}
	}
	gone := got[1].Texts[0]
	if gone.Count != 2 || !strings.Contains(gone.Text, "<n> keepalives in a row over <dur>") || !strings.Contains(gone.Example, "4 keepalives") {
		t.Errorf("the keepalive texts did not merge into one with the first as example: %+v", gone)
	}
	if c := countLoad(recs, 3); c.Sent != 10 || c.Finished != 1 || c.Errored != 9 || c.TimedOut != 1 || c.Skipped != 3 {
		t.Errorf("counts %+v", c)
	}
}

func TestSummarize(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want stat
	}{
		{nil, stat{}},
		{[]float64{5}, stat{N: 1, Start: 5, Median: 5, End: 5, Max: 5}},
		{[]float64{30, 10, 20}, stat{N: 3, Start: 30, Median: 20, End: 20, Max: 30}},
		{[]float64{1, 4, 3, 2}, stat{N: 4, Start: 1, Median: 2.5, End: 2, Max: 4}},
	} {
		if got := summarize(tc.in); got != tc.want {
			t.Errorf("summarize(%v) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
}

func TestSummarizeProcs(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	// Out of order, two incarnations of rank1 and one of nats.
	samples := []procSample{
		{T: at(6), Proc: "rank1", Inc: 1, PID: 10, RSSKiB: 3072, FDs: 12, Threads: 8},
		{T: at(0), Proc: "rank1", Inc: 1, PID: 10, RSSKiB: 1024, FDs: 10, Threads: 7},
		{T: at(3), Proc: "rank1", Inc: 1, PID: 10, RSSKiB: 4096, FDs: 11, Threads: 8},
		{T: at(9), Proc: "rank1", Inc: 2, PID: 20, RSSKiB: 2048, FDs: 12, Threads: 8},
		{T: at(1), Proc: "nats", Inc: 1, PID: 5, RSSKiB: 512, FDs: 15, Threads: 9},
	}
	got := summarizeProcs(samples)
	if len(got) != 3 || got[0].Proc != "nats" || got[1].Inc != 1 || got[2].Inc != 2 {
		t.Fatalf("summaries not by process and incarnation: %+v", got)
	}
	r1 := got[1]
	if r1.PID != 10 || !r1.First.Equal(at(0)) || !r1.Last.Equal(at(6)) {
		t.Errorf("rank1#1: pid %d, life %v to %v", r1.PID, r1.First, r1.Last)
	}
	if want := (stat{N: 3, Start: 1, Median: 3, End: 3, Max: 4}); r1.RSSMiB != want {
		t.Errorf("rank1#1 RSS MiB %+v, want %+v (time order, KiB to MiB)", r1.RSSMiB, want)
	}
	if want := (stat{N: 3, Start: 10, Median: 11, End: 12, Max: 12}); r1.FDs != want {
		t.Errorf("rank1#1 FDs %+v, want %+v", r1.FDs, want)
	}
	if got[2].RSSMiB.N != 1 || got[2].PID != 20 {
		t.Errorf("rank1#2: %+v", got[2])
	}
}

func seeded(id int, tokens []int32, finish string) reqRecord {
	s := uint64(id)
	r := reqRecord{ID: id, Tokens: tokens, Finish: finish}
	r.Request.Seed = &s
	return r
}

func TestCompareReplay(t *testing.T) {
	withLogprobs := seeded(4, []int32{7}, api.FinishLength)
	withLogprobs.Logprobs = "aaaa"
	streamLost := seeded(9, []int32{7, 8}, api.FinishLength)
	streamLost.Logprobs, streamLost.Stream = "cccc", streamCheck{Streamed: 1, Missing: 1}
	lpLost := seeded(10, []int32{3}, api.FinishLength)
	lpLost.Logprobs, lpLost.LogprobsMissing = "eeee", 1
	errored := seeded(5, []int32{1}, api.FinishError)
	errored.Error = "rank 0 is gone"
	recs := []reqRecord{
		seeded(1, []int32{1, 2, 3}, api.FinishLength),
		seeded(2, []int32{1, 2, 3}, api.FinishLength),
		seeded(3, []int32{1, 2}, api.FinishStop),
		withLogprobs,
		errored,
		{ID: 6, Tokens: []int32{9}, Finish: api.FinishLength}, // unseeded
		seeded(7, []int32{4}, api.FinishLength),
		seeded(8, []int32{4}, api.FinishLength),
		streamLost,
		lpLost,
	}
	replays := map[int]replayRecord{
		1:  {ID: 1, Tokens: []int32{1, 2, 3}, Finish: api.FinishLength},
		2:  {ID: 2, Tokens: []int32{1, 9, 3}, Finish: api.FinishLength},
		3:  {ID: 3, Tokens: []int32{1, 2}, Finish: api.FinishLength},
		4:  {ID: 4, Tokens: []int32{7}, Finish: api.FinishLength, Logprobs: "bbbb"},
		5:  {ID: 5, Tokens: []int32{1, 2}, Finish: api.FinishLength},
		7:  {ID: 7, Error: "timeout"},
		9:  {ID: 9, Tokens: []int32{7, 8}, Finish: api.FinishLength, Logprobs: "dddd"},
		10: {ID: 10, Tokens: []int32{3}, Finish: api.FinishLength, Logprobs: "ffff"},
		// 8 missing
	}
	c := compareReplay(recs, replays)
	if c.Seeded != 9 || c.Compared != 6 || c.Matched != 4 || c.ExcludedErrored != 1 || c.Unseeded != 1 {
		t.Errorf("counts %+v", c)
	}
	wantMis := []mismatch{{2, "token 1: soak 2, replay 9 (lengths 3 and 3)"}, {3, `finish reason "stop", replay "length"`}}
	if !reflect.DeepEqual(c.Mismatches, wantMis) {
		t.Errorf("mismatches %+v, want %+v", c.Mismatches, wantMis)
	}
	if len(c.LogprobMismatches) != 1 || c.LogprobMismatches[0].ID != 4 {
		t.Errorf("logprob mismatches %+v", c.LogprobMismatches)
	}
	if len(c.LogprobsIncomplete) != 2 || c.LogprobsIncomplete[0].What != "of 2 tokens, 1 token replies and 0 logprobs replies lost" ||
		c.LogprobsIncomplete[1].What != "of 1 tokens, 0 token replies and 1 logprobs replies lost" {
		t.Errorf("incomplete logprobs %+v", c.LogprobsIncomplete)
	}
	if len(c.ReplayFailed) != 2 || c.ReplayFailed[0].ID != 7 || c.ReplayFailed[1].What != "not replayed" {
		t.Errorf("replay failures %+v", c.ReplayFailed)
	}
	if got := toReplay(recs); len(got) != 8 {
		t.Errorf("toReplay chose %d requests, want the 8 seeded that finished", len(got))
	}
	if d := tokenDiff([]int32{1, 2}, []int32{1, 2, 3}); d != "lengths differ: soak 2 tokens, replay 3 (equal up to 2)" {
		t.Errorf("tokenDiff: %s", d)
	}
}

func TestCheckStream(t *testing.T) {
	final := []int32{5, 6, 7, 8}
	for _, tc := range []struct {
		idx  []int
		toks []int32
		want streamCheck
	}{
		{[]int{0, 1, 2, 3}, []int32{5, 6, 7, 8}, streamCheck{Streamed: 4}},
		{[]int{0, 2}, []int32{5, 7}, streamCheck{Streamed: 2, Missing: 2}},
		{[]int{0, 1, 1, 2, 3}, []int32{5, 6, 6, 7, 8}, streamCheck{Streamed: 5, Duplicates: 1}},
		{[]int{0, 1, 2, 3, 4}, []int32{5, 9, 7, 8, 1}, streamCheck{Streamed: 5, Conflicting: 2, Missing: 1}},
	} {
		if got := checkStream(tc.idx, tc.toks, final); got != tc.want {
			t.Errorf("checkStream(%v, %v) = %+v, want %+v", tc.idx, tc.toks, got, tc.want)
		}
	}
}

func TestRenderNATSConf(t *testing.T) {
	tmpl, err := os.ReadFile("../../configs/nats/nats-server.conf")
	if err != nil {
		t.Fatal(err)
	}
	pw := map[string]string{"rank0": "p0", "rank": "p1", "client": "p2"}
	conf, err := renderNATSConf(string(tmpl), "soak", 4321, pw)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"listen: 127.0.0.1:4321", `password: "p0"`, `password: "p1"`, `password: "p2"`, `"tpc.soak.step"`} {
		if !strings.Contains(conf, want) {
			t.Errorf("configuration lacks %s", want)
		}
	}
	for _, gone := range []string{"CHANGE-ME", "llm-granite", "0.0.0.0"} {
		if strings.Contains(conf, gone) {
			t.Errorf("configuration still has %s", gone)
		}
	}
	if _, err := renderNATSConf(strings.ReplaceAll(string(tmpl), `"CHANGE-ME-rank"`, `"x"`), "soak", 1, pw); err == nil || !strings.Contains(err.Error(), "user rank") {
		t.Errorf("a configuration without the rank user's placeholder: %v", err)
	}
}

func TestFailureLine(t *testing.T) {
	log := []string{
		"=== soak: rank1 incarnation 1 starting",
		`{"level":"ERROR","msg":"old incarnation"}`,
		"tpcoord: aborted: the old one",
		"=== soak: rank1 incarnation 2 starting",
		`{"level":"ERROR","msg":"peer lost"}`,
		`{"level":"ERROR","msg":"Failed to send gossip"}`,
		"tpcoord: aborted: rank 1: step does not fit this rank's batch",
		`{"level":"INFO","msg":"after"}`,
		"",
	}
	if got := failureLine(log); got != "tpcoord: aborted: rank 1: step does not fit this rank's batch" {
		t.Errorf("failureLine = %q", got)
	}
	if got := failureLine(log[:6]); got != `{"level":"ERROR","msg":"Failed to send gossip"}` {
		t.Errorf("without the final line: %q", got)
	}
	if got := failureLine(log[:4]); got != "" {
		t.Errorf("an incarnation that logged nothing: %q", got)
	}
}

func TestTokenLogprobs(t *testing.T) {
	lps := []api.Logprobs{{Token: 5, Logprob: -0.5}, {Token: -1}, {Token: 7, Logprob: -2}}
	got, missing := tokenLogprobs(4, lps)
	if missing != 2 || got[1] != nil || got[3] != nil || *got[0] != -0.5 || *got[2] != -2 {
		t.Errorf("tokenLogprobs: %v, %d missing", got, missing)
	}
	other, _ := tokenLogprobs(4, []api.Logprobs{{Token: 5, Logprob: -0.5}, {Token: 6, Logprob: -1}})
	if d := logprobDiff(got, other); d != ": token 1: soak none, replay -1" {
		t.Errorf("logprobDiff: %q", d)
	}
	if d := logprobDiff(got[:1], other[:1]); d != "" {
		t.Errorf("equal lists differ: %q", d)
	}
}

// Gateway requests are compared with the seed the gateway reported, the
// soak's or its own; every count is kept per path.
func TestCompareReplayPaths(t *testing.T) {
	s := uint64(77)
	viaGateway := func(id int, soakSeeded bool, tokens []int32) reqRecord {
		r := reqRecord{ID: id, Path: pathGateway, Tokens: tokens, Finish: api.FinishLength, GatewaySeed: &s}
		if soakSeeded {
			r.Request.Seed = &s
		}
		return r
	}
	goSeeded := seeded(1, []int32{1}, api.FinishLength)
	goSeeded.Path = pathGo
	noHeader := viaGateway(5, false, []int32{1})
	noHeader.GatewaySeed = nil
	erred := viaGateway(6, false, nil)
	erred.Finish, erred.Error = "", "HTTP 503 job_unavailable: rank 0 is gone"
	recs := []reqRecord{
		goSeeded,
		{ID: 2, Path: pathGo, Tokens: []int32{2}, Finish: api.FinishLength}, // unseeded: not comparable
		viaGateway(3, true, []int32{3}),
		viaGateway(4, false, []int32{4, 4}),
		noHeader,
		erred,
		viaGateway(7, true, []int32{7}),
	}
	other := uint64(78)
	recs[6].Request.Seed = &other // the gateway reported another seed than the request's
	if got := toReplay(recs); len(got) != 4 || got[2].ID != 4 || *got[2].replaySeed() != 77 {
		t.Fatalf("toReplay: %+v, want 1, 3, 4 (with the gateway's seed) and 7", got)
	}
	replays := map[int]replayRecord{
		1: {ID: 1, Tokens: []int32{1}, Finish: api.FinishLength},
		3: {ID: 3, Tokens: []int32{3}, Finish: api.FinishLength},
		4: {ID: 4, Tokens: []int32{4, 5}, Finish: api.FinishLength},
	}
	c := compareReplay(recs, replays)
	goC, gwC := c.Paths[pathGo], c.Paths[pathGateway]
	if *goC != (pathComparison{Seeded: 1, Compared: 1, Matched: 1, Unseeded: 1}) {
		t.Errorf("Go client: %+v", *goC)
	}
	if *gwC != (pathComparison{Seeded: 2, GatewaySeeded: 3, Compared: 2, Matched: 1, ExcludedErrored: 1}) {
		t.Errorf("gateway: %+v", *gwC)
	}
	if c.Compared != 3 || c.Matched != 2 || c.GatewaySeeded != 3 || len(c.Mismatches) != 2 || c.Mismatches[0].ID != 4 ||
		c.Mismatches[1].What != "Tpcoord-Seed 77, but the request's seed is 78" {
		t.Errorf("totals %+v", c)
	}
	if c.allEqual() {
		t.Error("allEqual with mismatches")
	}
	if len(c.ReplayFailed) != 1 || c.ReplayFailed[0].ID != 5 || !strings.Contains(c.ReplayFailed[0].What, "Tpcoord-Seed") {
		t.Errorf("replay failures %+v", c.ReplayFailed)
	}
}

func TestErrorsAndLoadByPath(t *testing.T) {
	recs := []reqRecord{
		{ID: 1, Path: pathGo, Error: "rank 0: unavailable: rank 0 is waiting for the world to re-form"},
		{ID: 2, Path: pathGateway, Error: "HTTP 503 reforming: rank 0: unavailable: rank 0 is waiting for the world to re-form"},
		{ID: 3, Path: pathGateway, Error: "error event: job_unavailable: rank 0 of job \"soak\" is gone: 8 keepalives in a row over 3s found nobody"},
		{ID: 4, Path: pathGateway, Tokens: []int32{1, 2}, Finish: api.FinishStop},
	}
	g := groupErrors(recs)
	if len(g) != 2 || g[0].Count != 2 || g[0].ByPath[pathGo] != 1 || g[0].ByPath[pathGateway] != 1 || len(g[0].Texts) != 2 {
		t.Errorf("re-forming errors by path: %+v", g)
	}
	if g[1].Cause != "rank 0 is gone (keepalives found nobody)" || g[1].ByPath[pathGateway] != 1 {
		t.Errorf("the gateway's error event: %+v", g[1])
	}
	by := countPaths(recs)
	if by[pathGo].Sent != 1 || by[pathGo].Errored != 1 || by[pathGateway].Sent != 3 || by[pathGateway].Finished != 1 || by[pathGateway].Tokens != 2 {
		t.Errorf("load by path: %+v", by)
	}
}
