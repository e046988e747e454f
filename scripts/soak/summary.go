package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/tpcoord/tpcoord/broadcast/api"
)

// summary is summary.json: the run's figures.
type summary struct {
	Command     string    `json:"command"`
	AgentArgs   []string  `json:"agent_args"` // rank 1's
	GatewayArgs []string  `json:"gateway_args"`
	JobKey      bool      `json:"job_key"`
	Machine     string    `json:"machine"`
	LoadBefore  string    `json:"uptime_before"`
	LoadAfter   string    `json:"uptime_after"`
	Started     time.Time `json:"started"`
	LoadEnded   time.Time `json:"load_ended"`
	Ended       time.Time `json:"ended"`
	Interrupted bool      `json:"interrupted"`

	Load       loadCounts            `json:"load"`
	LoadByPath map[string]loadCounts `json:"load_by_path"`
	Errors     []errorGroup          `json:"errors"`
	// ErrorsByFault: cause → the last fault before the error → count.
	ErrorsByFault map[string]map[string]int `json:"errors_by_fault"`
	Comparison    *comparison               `json:"comparison,omitempty"`
	// ReplayError: the replay could not run.
	ReplayError string `json:"replay_error,omitempty"`

	// Settled: at the end every rank served, idle, at rank 0's step and
	// digest; Final is their last status.
	Settled    bool             `json:"settled"`
	Final      []api.RankStatus `json:"final"`
	FinalExits []event          `json:"final_exits"` // after the closing SIGTERM
	Worlds     []worldSeen      `json:"worlds"`
	Exits      []event          `json:"unexpected_exits"`
	Faults     []faultRecord    `json:"faults"`
	Recoveries []recovery       `json:"recoveries"`
	Latency    *addedLatency    `json:"added_latency,omitempty"`
	Procs      []procSummary    `json:"procs"`
}

// worldSeen is one formed world (rank 0's member and epoch) and when
// status showed it serving.
type worldSeen struct {
	Key   worldKey  `json:"key"`
	First time.Time `json:"first"`
	Last  time.Time `json:"last"`
	Polls int       `json:"polls"`
}

// worldsSeen lists the worlds the polls showed serving, by first sight.
func worldsSeen(polls []statusPoll, world int) []worldSeen {
	var out []worldSeen
	for i := range polls {
		k, ok := polls[i].serving(world)
		if !ok {
			continue
		}
		j := slices.IndexFunc(out, func(w worldSeen) bool { return w.Key == k })
		if j < 0 {
			out = append(out, worldSeen{Key: k, First: polls[i].T})
			j = len(out) - 1
		}
		out[j].Last = polls[i].T
		out[j].Polls++
	}
	return out
}

// unexpected lists the exits the soak did not cause.
func unexpected(events []event) []event {
	var out []event
	for _, e := range events {
		if e.Kind == "exit" && e.Exit != nil && !e.Exit.Expected {
			out = append(out, e)
		}
	}
	return out
}

// write fills in the figures and writes summary.json and summary.md.
func (s *soak) write() error {
	sum := &s.sum
	sum.Command = strings.Join(os.Args, " ")
	if s.load != nil {
		recs, skipped := s.load.results()
		sum.Load, sum.LoadByPath, sum.Errors = countLoad(recs, skipped), countPaths(recs), groupErrors(recs)
		sum.Faults = s.fault.results()
		sum.ErrorsByFault = errorsByFault(recs, sum.Faults)
		polls, samples := s.mon.results()
		sum.Recoveries = recoveries(sum.Faults, recs, polls, s.o.world, sum.LoadEnded)
		lat := addedLatencies(recs, sum.Recoveries, sum.LoadEnded)
		sum.Latency = &lat
		sum.Worlds, sum.Procs = worldsSeen(polls, s.o.world), summarizeProcs(samples)
		sum.AgentArgs = s.fault.job.agentArgs(1)
		sum.GatewayArgs = s.fault.job.gw.args
		sum.JobKey = s.fault.job.spec.keyFile != ""
	}
	sum.Exits = unexpected(s.ev.events())
	b, err := json.MarshalIndent(sum, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(s.o.dir, "summary.json"), b, 0o644); err != nil {
		return err
	}
	md := markdown(sum, s.o)
	if err := os.WriteFile(filepath.Join(s.o.dir, "summary.md"), []byte(md), 0o644); err != nil {
		return err
	}
	_, err = os.Stdout.WriteString(md)
	return err
}
