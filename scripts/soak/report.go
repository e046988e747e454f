package main

import (
	"cmp"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/internal/stats"
)

// reqRecord is one request of the load, as requests.jsonl holds it: what
// was asked (replayable as is) and how it ended.
type reqRecord struct {
	ID int `json:"id"`
	// Path is how the request went: pathGo or pathGateway.
	Path    string              `json:"path"`
	Sent    time.Time           `json:"sent"`
	Done    time.Time           `json:"done"`
	Request api.GenerateRequest `json:"request"`
	// GatewaySeed is the gateway's Tpcoord-Seed header: the request's seed,
	// or the one the gateway drew for it (gateway path only).
	GatewaySeed *uint64 `json:"gateway_seed,omitempty"`
	Tokens      []int32 `json:"tokens"`
	// TokenMs is each token's arrival, in ms after Sent, in arrival order:
	// the Go client's token callbacks, or the gateway's chunks.
	TokenMs  []float64 `json:"token_ms,omitempty"`
	Finish   string    `json:"finish,omitempty"`
	Logprobs string    `json:"logprobs_fnv,omitempty"` // FNV-1a of the logprobs' JSON
	// TokenLogprob is each token's own logprob (null: none came), and
	// LogprobsMissing how many tokens have none: logprobs come in replies
	// of their own, after each token's, and are not repeated at the end.
	TokenLogprob    []*float32  `json:"token_logprob,omitempty"`
	LogprobsMissing int         `json:"logprobs_missing,omitempty"`
	Stream          streamCheck `json:"stream"`
	Error           string      `json:"error,omitempty"`
	TimedOut        bool        `json:"timed_out,omitempty"` // the soak's own deadline ended it
}

// ok reports whether the request finished normally.
func (r *reqRecord) ok() bool {
	return r.Error == "" && !r.TimedOut && (r.Finish == api.FinishLength || r.Finish == api.FinishStop)
}

// seeded reports whether the soak gave the request a seed.
func (r *reqRecord) seeded() bool { return r.Request.Seed != nil }

// replaySeed is the seed the request can be run again with: the soak's,
// or on the gateway path the one the gateway reported; nil: none (a Go
// client request without a seed).
func (r *reqRecord) replaySeed() *uint64 {
	if r.Path == pathGateway {
		return r.GatewaySeed
	}
	return r.Request.Seed
}

// errorText is why a request did not finish normally.
func (r *reqRecord) errorText() string {
	if r.Error == "" {
		return "finish reason " + r.Finish
	}
	return r.Error
}

// streamCheck compares the tokens streamed one by one with the final
// reply's list (only Streamed is set when no final reply came). Core NATS delivers at most once, so a streamed token can
// be missing across a NATS restart; a duplicate or a conflicting token
// would mean a token was generated twice.
type streamCheck struct {
	Streamed    int `json:"streamed"`
	Missing     int `json:"missing,omitempty"`
	Duplicates  int `json:"duplicates,omitempty"`
	Conflicting int `json:"conflicting,omitempty"`
}

// checkStream compares streamed (index, token) pairs, in arrival order,
// with the final token list.
func checkStream(indexes []int, tokens []int32, final []int32) streamCheck {
	c := streamCheck{Streamed: len(indexes)}
	seen := make([]bool, len(final))
	for i, idx := range indexes {
		switch {
		case idx < 0 || idx >= len(final) || tokens[i] != final[idx]:
			c.Conflicting++
		case seen[idx]:
			c.Duplicates++
		default:
			seen[idx] = true
		}
	}
	for _, s := range seen {
		if !s {
			c.Missing++
		}
	}
	return c
}

// causes map an error's text to its cause, first match wins. Texts no
// pattern knows are their own cause.
var causes = []struct{ substr, cause string }{
	{"waiting for the world to re-form", "unavailable: rank 0 is waiting for the world to re-form"},
	{"found nobody", "rank 0 is gone (keepalives found nobody)"},
	{"no longer holds this request", "rank 0 no longer holds the request (it restarted)"},
	{"no rank 0 serves job", "no responders: no rank 0 subscribed to generate"},
	{"connection to NATS lost", "the client's NATS connection closed"},
	{"the world did not re-form", "rank 0 gave up re-forming"},
	{"shutting down", "rank 0 shutting down"},
	{"overloaded", "overloaded"},
	{"submit request", "could not submit"},
}

// classify names the cause of one request's error.
func classify(text string, timedOut bool) string {
	if timedOut {
		return "timeout: no end within the soak's request deadline"
	}
	for _, c := range causes {
		if strings.Contains(text, c.substr) {
			return c.cause
		}
	}
	return normalize(text)
}

var normalizers = []struct {
	re   *regexp.Regexp
	repl string
}{
	{regexp.MustCompile(`_INBOX\.[A-Za-z0-9._-]+`), "<inbox>"},
	{regexp.MustCompile(`\b[0-9a-f]{8,}\b`), "<hex>"},
	{regexp.MustCompile(`\bpid \d+`), "pid <n>"},
	{regexp.MustCompile(`\bsteps? \d+(\.\.\d+)?`), "step <n>"},
	{regexp.MustCompile(`\b\d+(\.\d+)?(ns|µs|us|ms|s|m|h)\b`), "<dur>"},
	{regexp.MustCompile(`\b\d+ keepalives`), "<n> keepalives"},
}

// normalize blanks out what differs between two occurrences of one error
// (durations, IDs, pids, step numbers), so they group together.
func normalize(text string) string {
	for _, n := range normalizers {
		text = n.re.ReplaceAllString(text, n.repl)
	}
	return text
}

// textCount is one normalized error text, how often it occurred, and one
// occurrence as it was.
type textCount struct {
	Text    string `json:"text"`
	Count   int    `json:"count"`
	Example string `json:"example"`
}

// errorGroup is the errors of one cause, and how many came by each path.
type errorGroup struct {
	Cause  string         `json:"cause"`
	Count  int            `json:"count"`
	ByPath map[string]int `json:"by_path"`
	Texts  []textCount    `json:"texts"`
}

// groupErrors groups the failed requests' errors by cause, most frequent
// first (ties by name), and within a cause by normalized text.
func groupErrors(recs []reqRecord) []errorGroup {
	byCause := map[string]*errorGroup{}
	for i := range recs {
		r := &recs[i]
		if r.ok() {
			continue
		}
		text := r.errorText()
		cause := classify(text, r.TimedOut)
		g := byCause[cause]
		if g == nil {
			g = &errorGroup{Cause: cause, ByPath: map[string]int{}}
			byCause[cause] = g
		}
		g.Count++
		g.ByPath[r.Path]++
		g.addText(normalize(text), text)
	}
	out := make([]errorGroup, 0, len(byCause))
	for _, g := range byCause {
		slices.SortFunc(g.Texts, func(a, b textCount) int {
			return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Text, b.Text))
		})
		out = append(out, *g)
	}
	slices.SortFunc(out, func(a, b errorGroup) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Cause, b.Cause))
	})
	return out
}

func (g *errorGroup) addText(norm, raw string) {
	for i := range g.Texts {
		if g.Texts[i].Text == norm {
			g.Texts[i].Count++
			return
		}
	}
	g.Texts = append(g.Texts, textCount{Text: norm, Count: 1, Example: raw})
}

// loadCounts are the load's totals.
type loadCounts struct {
	Sent     int `json:"sent"`
	Finished int `json:"finished"` // ended normally (length or stop)
	Errored  int `json:"errored"`  // ended with an error (timeouts included)
	TimedOut int `json:"timed_out"`
	Skipped  int `json:"skipped"` // not sent: the in-flight cap was reached
	Tokens   int `json:"tokens"`  // tokens of the finished requests
	// The mix, over the requests sent.
	Greedy, Seeded, Logprobs int
	// Streams whose streamed tokens did not match the final list.
	StreamMissing, StreamDuplicates, StreamConflicting int
	LogprobsMissing                                    int // finished requests that lack some logprobs
}

// countPaths counts each path's requests (none skipped: the cap is
// reached before a path is chosen).
func countPaths(recs []reqRecord) map[string]loadCounts {
	out := map[string]loadCounts{}
	for _, p := range paths {
		var of []reqRecord
		for i := range recs {
			if recs[i].Path == p {
				of = append(of, recs[i])
			}
		}
		out[p] = countLoad(of, 0)
	}
	return out
}

func countLoad(recs []reqRecord, skipped int) loadCounts {
	c := loadCounts{Sent: len(recs), Skipped: skipped}
	for i := range recs {
		r := &recs[i]
		if r.ok() {
			c.Finished++
			c.Tokens += len(r.Tokens)
		} else {
			c.Errored++
		}
		if r.TimedOut {
			c.TimedOut++
		}
		c.mix(&r.Request)
		if r.Stream.Missing > 0 {
			c.StreamMissing++
		}
		if r.LogprobsMissing > 0 && r.ok() {
			c.LogprobsMissing++
		}
		if r.Stream.Duplicates > 0 {
			c.StreamDuplicates++
		}
		if r.Stream.Conflicting > 0 {
			c.StreamConflicting++
		}
	}
	return c
}

func (c *loadCounts) mix(req *api.GenerateRequest) {
	if req.Temperature < api.GreedyBelow {
		c.Greedy++
	}
	if req.Seed != nil {
		c.Seeded++
	}
	if req.Logprobs != nil {
		c.Logprobs++
	}
}

// stat summarizes a series sampled over a process's life.
type stat struct {
	N      int     `json:"n"`
	Start  float64 `json:"start"`
	Median float64 `json:"median"`
	End    float64 `json:"end"`
	Max    float64 `json:"max"`
}

// summarize takes the values in time order.
func summarize(v []float64) stat {
	if len(v) == 0 {
		return stat{}
	}
	return stat{N: len(v), Start: v[0], Median: stats.Median(v), End: v[len(v)-1], Max: slices.Max(v)}
}

// procSample is one reading of a process's /proc entries.
type procSample struct {
	T       time.Time `json:"t"`
	Proc    string    `json:"proc"` // rank0..rank3, nats
	Inc     int       `json:"inc"`  // incarnation: 1 for the first start
	PID     int       `json:"pid"`
	RSSKiB  int64     `json:"rss_kib"`
	FDs     int       `json:"fds"`
	Threads int       `json:"threads"`
}

// procSummary is one process incarnation's resources over its life.
type procSummary struct {
	Proc    string    `json:"proc"`
	Inc     int       `json:"inc"`
	PID     int       `json:"pid"`
	First   time.Time `json:"first"`
	Last    time.Time `json:"last"`
	RSSMiB  stat      `json:"rss_mib"`
	FDs     stat      `json:"fds"`
	Threads stat      `json:"threads"`
}

// summarizeProcs groups samples by process incarnation, in order of
// process name and incarnation; samples need not be sorted.
func summarizeProcs(samples []procSample) []procSummary {
	type key struct {
		proc string
		inc  int
	}
	groups := map[key][]procSample{}
	for _, s := range samples {
		k := key{s.Proc, s.Inc}
		groups[k] = append(groups[k], s)
	}
	out := make([]procSummary, 0, len(groups))
	for k, g := range groups {
		slices.SortFunc(g, func(a, b procSample) int { return a.T.Compare(b.T) })
		var rss, fds, thr []float64
		for _, s := range g {
			rss = append(rss, float64(s.RSSKiB)/1024)
			fds = append(fds, float64(s.FDs))
			thr = append(thr, float64(s.Threads))
		}
		out = append(out, procSummary{Proc: k.proc, Inc: k.inc, PID: g[0].PID, First: g[0].T, Last: g[len(g)-1].T,
			RSSMiB: summarize(rss), FDs: summarize(fds), Threads: summarize(thr)})
	}
	slices.SortFunc(out, func(a, b procSummary) int {
		return cmp.Or(cmp.Compare(a.Proc, b.Proc), cmp.Compare(a.Inc, b.Inc))
	})
	return out
}
