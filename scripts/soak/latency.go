package main

import (
	"math"
	"slices"
	"time"

	"github.com/tpcoord/tpcoord/internal/stats"
)

// The latency a fault adds to the requests it catches. A request's
// largest wait is the longest it went without news: from sending to its
// first token, or between two consecutive tokens. A fault's window runs
// from its injection to its recovery. The baseline of a path is the
// median largest wait of that path's requests that finished normally and
// overlapped no fault's window. A request in flight when a fault was
// injected (sent before, ended after) and that finished normally adds its
// largest wait minus its path's baseline to that fault's kind; one that
// did not finish normally is counted apart (the errors table has it).

// latencyStat is a count and the nearest-rank p50 and p99 and the max of
// added latencies, in ms.
type latencyStat struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50_ms"`
	P99 float64 `json:"p99_ms"`
	Max float64 `json:"max_ms"`
}

func latencyStats(v []float64) latencyStat {
	if len(v) == 0 {
		return latencyStat{}
	}
	s := slices.Sorted(slices.Values(v))
	return latencyStat{N: len(s), P50: nearest(s, 0.50), P99: nearest(s, 0.99), Max: s[len(s)-1]}
}

// nearest is the nearest-rank q-quantile of sorted values: the smallest
// with at least a share q of the values at or below it.
func nearest(sorted []float64, q float64) float64 {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// kindLatency is the added latency of the requests in flight at the faults
// of one kind, over both paths and per path.
type kindLatency struct {
	Kind   string                 `json:"kind"`
	Faults int                    `json:"faults"`
	All    latencyStat            `json:"all"`
	ByPath map[string]latencyStat `json:"by_path"`
	// Failed were in flight but did not finish normally: not measured.
	Failed int `json:"failed"`
}

// addedLatency is the added latency per fault kind, and the baselines it
// is counted from.
type addedLatency struct {
	// BaselineMs is each path's median largest wait over Clean requests:
	// finished normally, overlapping no fault's window.
	BaselineMs map[string]float64 `json:"baseline_ms"`
	Clean      map[string]int     `json:"clean"`
	Kinds      []kindLatency      `json:"kinds"`
}

// faultWindow is when a fault disturbed the job.
type faultWindow struct {
	kind     string
	from, to time.Time
}

// faultWindows are the injected faults' windows: from the fault to its
// recovery, the later of every rank serving again and a request sent
// after the fault finishing (and at least to the injection's end). A
// fault not recovered from before the next one (or until) lasts until
// then.
func faultWindows(rs []recovery, until time.Time) []faultWindow {
	out := make([]faultWindow, len(rs))
	for i, rv := range rs {
		f := rv.Fault
		to := until
		if i+1 < len(rs) {
			to = rs[i+1].Fault.At
		}
		if rv.WorldMs >= 0 && rv.NextNewOKMs >= 0 {
			to = f.At.Add(time.Duration(max(rv.WorldMs, rv.NextNewOKMs) * float64(time.Millisecond)))
		}
		if f.End.After(to) {
			to = f.End
		}
		out[i] = faultWindow{kind: f.Kind, from: f.At, to: to}
	}
	return out
}

// maxWaitMs is a request's largest wait, from its token arrivals; one
// without a token waited from sending to its end.
func maxWaitMs(r *reqRecord) float64 {
	if len(r.TokenMs) == 0 {
		return msSince(r.Sent, r.Done)
	}
	prev, w := 0.0, 0.0
	for _, t := range r.TokenMs {
		w, prev = max(w, t-prev), t
	}
	return w
}

// overlapsAny reports whether r was in flight during any window.
func overlapsAny(r *reqRecord, ws []faultWindow) bool {
	for _, w := range ws {
		if r.Sent.Before(w.to) && r.Done.After(w.from) {
			return true
		}
	}
	return false
}

// baselines are each path's median largest wait over its clean requests,
// and how many those were.
func baselines(recs []reqRecord, ws []faultWindow) (median map[string]float64, clean map[string]int) {
	waits := map[string][]float64{}
	for i := range recs {
		r := &recs[i]
		if r.ok() && !overlapsAny(r, ws) {
			waits[r.Path] = append(waits[r.Path], maxWaitMs(r))
		}
	}
	median, clean = map[string]float64{}, map[string]int{}
	for _, p := range paths {
		median[p], clean[p] = stats.Median(waits[p]), len(waits[p])
	}
	return median, clean
}

// addedLatencies measures the latency the faults of each kind added to
// the requests in flight at them; until is the end of the load.
func addedLatencies(recs []reqRecord, rs []recovery, until time.Time) addedLatency {
	ws := faultWindows(rs, until)
	var a addedLatency
	a.BaselineMs, a.Clean = baselines(recs, ws)
	byKind := map[string]*kindLatency{}
	added := map[string]map[string][]float64{} // kind, path
	for _, w := range ws {
		k := byKind[w.kind]
		if k == nil {
			k = &kindLatency{Kind: w.kind, ByPath: map[string]latencyStat{}}
			byKind[w.kind], added[w.kind] = k, map[string][]float64{}
		}
		k.Faults++
		for i := range recs {
			r := &recs[i]
			switch {
			case !r.Sent.Before(w.from) || !r.Done.After(w.from):
			case !r.ok():
				k.Failed++
			default:
				added[w.kind][r.Path] = append(added[w.kind][r.Path], maxWaitMs(r)-a.BaselineMs[r.Path])
			}
		}
	}
	for _, kind := range faultKinds {
		k := byKind[kind]
		if k == nil {
			continue
		}
		var all []float64
		for _, p := range paths {
			k.ByPath[p] = latencyStats(added[kind][p])
			all = append(all, added[kind][p]...)
		}
		k.All = latencyStats(all)
		a.Kinds = append(a.Kinds, *k)
	}
	return a
}
