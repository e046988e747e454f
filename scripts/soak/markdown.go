package main

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// markdown renders the summary for a reader.
func markdown(sum *summary, o *options) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("# tpcoord soak, %s\n\n", sum.Started.UTC().Format("2006-01-02 15:04 MST"))
	w("- command: `%s`\n", sum.Command)
	w("- agents (rank 1; rank 0 has no `--join`; NATS credentials in `TPC_NATS`): `tpcoord %s`\n", strings.Join(sum.AgentArgs, " "))
	w("- gateway (NATS credentials of user `client` in `TPC_NATS`): `tpcoord %s`\n", strings.Join(sum.GatewayArgs, " "))
	w("- job key (`--job-key-file`): %v\n", sum.JobKey)
	w("- duration %v (load %s to %s), %d faults scheduled from %v, %v apart at least\n",
		o.duration, clock(sum.Started), clock(sum.LoadEnded), len(sum.Faults), o.warmup, o.faultGap)
	w("- machine: %s\n- before: `%s`\n- after: `%s`\n", sum.Machine, sum.LoadBefore, sum.LoadAfter)
	if sum.Interrupted {
		w("- **interrupted**: the figures cover the run up to the interruption\n")
	}
	writeLoad(&b, sum, o)
	writeErrors(&b, sum.Errors)
	writeErrorsByFault(&b, sum)
	writeComparison(&b, sum)
	writeFinal(&b, sum)
	writeRecoveries(&b, sum)
	writeLatency(&b, sum.Latency)
	writeExits(&b, sum)
	writeProcs(&b, sum.Procs)
	return b.String()
}

func clock(t time.Time) string { return t.UTC().Format("15:04:05") }

// pathNames are the paths as the tables name them.
var pathNames = map[string]string{pathGo: "Go client", pathGateway: "gateway"}

func writeLoad(b *strings.Builder, sum *summary, o *options) {
	l := &sum.Load
	fmt.Fprintf(b, "\n## Load\n\n%.1f requests/s, at most %d in flight, deadline %v each, every other one through the gateway (a streaming `/v1/completions`), the others through the Go client; of those sent %d greedy, %d seeded, %d with logprobs.\n\n",
		o.rate, o.maxInFlight, o.requestTimeout, l.Greedy, l.Seeded, l.Logprobs)
	fmt.Fprintf(b, "| path | sent | finished | errored | of which timed out | skipped (in-flight cap) | tokens (finished) | missed streamed tokens | a token twice | a conflicting token | finished lacking logprobs |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	row := func(name string, l *loadCounts, skipped string) {
		fmt.Fprintf(b, "| %s | %d | %d | %d | %d | %s | %d | %d | %d | %d | %d |\n", name, l.Sent, l.Finished, l.Errored, l.TimedOut, skipped, l.Tokens,
			l.StreamMissing, l.StreamDuplicates, l.StreamConflicting, l.LogprobsMissing)
	}
	row("all", l, fmt.Sprint(l.Skipped))
	for _, p := range paths {
		if pl, ok := sum.LoadByPath[p]; ok {
			row(pathNames[p], &pl, "—") // skipped before a path is chosen
		}
	}
	fmt.Fprintf(b, "\nStreamed tokens: on the Go client against the final reply's list (NATS delivers at most once: a lost reply is a missed token, which the final reply fills in); on the gateway, whose chunks carry no index, the chunks' tokens against the usage chunk's count (fewer: a gap, more: a repeat). Logprobs come only in replies of their own.\n")
}

func writeErrors(b *strings.Builder, groups []errorGroup) {
	fmt.Fprintf(b, "\n## Errors by cause\n\n")
	if len(groups) == 0 {
		fmt.Fprintf(b, "None.\n")
		return
	}
	fmt.Fprintf(b, "| cause | count | Go client | gateway | texts (count), one example each |\n|---|---|---|---|---|\n")
	for _, g := range groups {
		var texts []string
		for _, t := range g.Texts {
			texts = append(texts, fmt.Sprintf("%s (%d), e.g. `%s`", cell(t.Text), t.Count, cell(t.Example)))
		}
		fmt.Fprintf(b, "| %s | %d | %d | %d | %s |\n", cell(g.Cause), g.Count, g.ByPath[pathGo], g.ByPath[pathGateway], strings.Join(texts, "<br>"))
	}
}

func writeErrorsByFault(b *strings.Builder, sum *summary) {
	if len(sum.Errors) == 0 {
		return
	}
	fmt.Fprintf(b, "\nThe same errors by the last fault injected before each ended:\n\n| cause | before any fault | %s |\n|---|---|%s\n",
		strings.Join(faultKinds, " | "), strings.Repeat("---|", len(faultKinds)))
	for _, g := range sum.Errors {
		row := sum.ErrorsByFault[g.Cause]
		fmt.Fprintf(b, "| %s | %d |", cell(g.Cause), row[""])
		for _, k := range faultKinds {
			fmt.Fprintf(b, " %d |", row[k])
		}
		fmt.Fprintf(b, "\n")
	}
}

// cell makes text safe in a table cell.
func cell(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ", "`", "'").Replace(s)
}

func writeComparison(b *strings.Builder, sum *summary) {
	fmt.Fprintf(b, "\n## Seeded requests against an undisturbed replay\n\n")
	c := sum.Comparison
	if c == nil {
		fmt.Fprintf(b, "Not run. %s\n", sum.ReplayError)
		return
	}
	fmt.Fprintf(b, "Every request that finished normally with a seed, the soak's or (gateway path) the one the gateway drew and reported in `Tpcoord-Seed`, ran again on a fresh job by the same path with that seed. **Every seeded and every gateway-seeded request equals its replay: %v.**\n\n",
		c.allEqual())
	fmt.Fprintf(b, "| path | seeded by the soak | seeded by the gateway | compared (finished normally) | same tokens and finish | with a seed but errored (excluded) | unseeded (not compared) |\n|---|---|---|---|---|---|---|\n")
	row := func(name string, p *pathComparison) {
		fmt.Fprintf(b, "| %s | %d | %d | %d | %d | %d | %d |\n", name, p.Seeded, p.GatewaySeeded, p.Compared, p.Matched, p.ExcludedErrored, p.Unseeded)
	}
	row("all", &c.pathComparison)
	for _, p := range paths {
		if pc := c.Paths[p]; pc != nil {
			row(pathNames[p], pc)
		}
	}
	fmt.Fprintf(b, "\nToken or finish mismatches: %d; logprob mismatches: %d; logprobs incomplete (streamed replies lost): %d; replays failed: %d.\n\n",
		len(c.Mismatches), len(c.LogprobMismatches), len(c.LogprobsIncomplete), len(c.ReplayFailed))
	for _, list := range []struct {
		name string
		ms   []mismatch
	}{{"Mismatches", c.Mismatches}, {"Logprob mismatches", c.LogprobMismatches}, {"Logprobs incomplete", c.LogprobsIncomplete}, {"Replay failures", c.ReplayFailed}} {
		for i, m := range list.ms {
			if i == 10 {
				fmt.Fprintf(b, "- … %d more\n", len(list.ms)-10)
				break
			}
			fmt.Fprintf(b, "- %s: request %d: %s\n", list.name, m.ID, m.What)
		}
	}
}

func writeFinal(b *strings.Builder, sum *summary) {
	fmt.Fprintf(b, "\n## Final state\n\nEvery rank serving, idle, at rank 0's step and digest: **%v**.\n\n", sum.Settled)
	fmt.Fprintf(b, "| rank | state | epoch | step | digest | refused messages |\n|---|---|---|---|---|---|\n")
	for _, r := range sum.Final {
		fmt.Fprintf(b, "| %d | %s | %d | %d | %s | %s |\n", r.Rank, r.State, r.Epoch, r.Step, r.Digest, counters(r.Rejected))
	}
	fmt.Fprintf(b, "\nWorlds seen serving (rank 0's member, epoch), in order: %d\n\n", len(sum.Worlds))
	fmt.Fprintf(b, "| first seen | last seen | rank 0 member | epoch |\n|---|---|---|---|\n")
	for _, w := range sum.Worlds {
		fmt.Fprintf(b, "| %s | %s | %s | %d |\n", clock(w.First), clock(w.Last), w.Key.Rank0, w.Key.Epoch)
	}
	fmt.Fprintf(b, "\nAfter the closing SIGTERM:")
	for _, e := range sum.FinalExits {
		fmt.Fprintf(b, " %s exit %s;", e.Proc, exitText(e.Exit))
	}
	fmt.Fprintf(b, "\n")
}

func counters(m map[string]uint64) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

func exitText(e *exitInfo) string {
	if e == nil {
		return "?"
	}
	if e.Signal != "" {
		return e.Signal
	}
	return fmt.Sprint(e.Code)
}

func writeRecoveries(b *strings.Builder, sum *summary) {
	fmt.Fprintf(b, "\n## Faults and recoveries\n\nTimes from the fault: to the next request that finished normally (any; sent after the fault), and to every rank serving once the injection ended (in a new world for kills and freezes). —: not before the next fault.\n\n")
	fmt.Fprintf(b, "| at | fault | target | next ok | next ok sent after | all ranks serving | world before → after | detail |\n|---|---|---|---|---|---|---|---|\n")
	next := 0
	for _, f := range sum.Faults {
		if f.Skipped != "" {
			fmt.Fprintf(b, "| %s | %s | %s | | | | | skipped: %s |\n", clock(f.At), f.Kind, f.Target, cell(f.Skipped))
			continue
		}
		if next < len(sum.Recoveries) {
			r := &sum.Recoveries[next]
			next++
			fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s e%d → %s e%d | %s |\n", clock(f.At), f.Kind, f.Target,
				ms(r.NextOKMs), ms(r.NextNewOKMs), ms(r.WorldMs), short(r.Before.Rank0), r.Before.Epoch, short(r.After.Rank0), r.After.Epoch, cell(f.Detail))
		}
	}
}

func ms(v float64) string {
	if v < 0 {
		return "—"
	}
	return fmt.Sprintf("%.1f s", v/1000)
}

// short is a member name's distinguishing suffix.
func short(member string) string {
	if i := strings.LastIndexByte(member, '-'); i >= 0 {
		return member[i+1:]
	}
	return member
}

func writeExits(b *strings.Builder, sum *summary) {
	fmt.Fprintf(b, "\n## Exits the soak did not cause\n\nEach such process was started again %v later, as systemd's Restart= would.\n\n", restartDelay)
	if len(sum.Exits) == 0 {
		fmt.Fprintf(b, "None.\n")
		return
	}
	fmt.Fprintf(b, "| at | process | pid | exit | last error logged |\n|---|---|---|---|---|\n")
	for _, e := range sum.Exits {
		fmt.Fprintf(b, "| %s | %s#%d | %d | %s | `%s` |\n", clock(e.T), e.Proc, e.Inc, e.PID, exitText(e.Exit), cell(e.Exit.LastErr))
	}
}

func writeProcs(b *strings.Builder, procs []procSummary) {
	fmt.Fprintf(b, "\n## Resources per process incarnation\n\nFrom /proc/<pid>/status (VmRSS, Threads) and /proc/<pid>/fd; start / median / end / max over the samples.\n\n")
	fmt.Fprintf(b, "| process | pid | life | samples | RSS MiB | open FDs | threads |\n|---|---|---|---|---|---|---|\n")
	for _, p := range procs {
		fmt.Fprintf(b, "| %s#%d | %d | %s | %d | %s | %s | %s |\n", p.Proc, p.Inc, p.PID, p.Last.Sub(p.First).Round(time.Second),
			p.RSSMiB.N, quad(p.RSSMiB, "%.1f"), quad(p.FDs, "%.0f"), quad(p.Threads, "%.0f"))
	}
}

func quad(s stat, f string) string {
	return fmt.Sprintf(f+" / "+f+" / "+f+" / "+f, s.Start, s.Median, s.End, s.Max)
}

func writeLatency(b *strings.Builder, a *addedLatency) {
	if a == nil {
		return
	}
	fmt.Fprintf(b, "\n## Added latency per fault kind\n\nA request's largest wait: send to first token, or between two tokens. Added latency: the largest wait of a request in flight when a fault was injected, minus the median largest wait of its path's requests that overlapped no fault's window (fault to recovery); requests that did not finish normally are not measured. Baselines: ")
	var base []string
	for _, p := range paths {
		base = append(base, fmt.Sprintf("%s %.1f ms over %d requests", pathNames[p], a.BaselineMs[p], a.Clean[p]))
	}
	fmt.Fprintf(b, "%s.\n\n", strings.Join(base, ", "))
	fmt.Fprintf(b, "| fault | faults | requests | p50 | p99 | max | Go client n, p50, p99 | gateway n, p50, p99 | in flight, not finished |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, k := range a.Kinds {
		fmt.Fprintf(b, "| %s | %d | %d | %s | %s | %s |", k.Kind, k.Faults, k.All.N, latMs(k.All.P50, k.All.N), latMs(k.All.P99, k.All.N), latMs(k.All.Max, k.All.N))
		for _, p := range paths {
			s := k.ByPath[p]
			fmt.Fprintf(b, " %d, %s, %s |", s.N, latMs(s.P50, s.N), latMs(s.P99, s.N))
		}
		fmt.Fprintf(b, " %d |\n", k.Failed)
	}
}

// latMs is an added latency, "—" when no request was measured.
func latMs(v float64, n int) string {
	if n == 0 {
		return "—"
	}
	return fmt.Sprintf("%.0f ms", v)
}
