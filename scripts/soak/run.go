package main

import (
	"context"
	crand "crypto/rand"
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tpcoord/tpcoord/broadcast/api"
)

// soak is one run: its options, outputs and results.
type soak struct {
	o   *options
	ev  *eventLog
	out map[string]*jsonl // by file name without .jsonl
	sum summary

	mon   *monitor
	load  *loadGen
	fault *faulter
}

var outputs = []string{"requests", "faults", "status", "procs", "replay"}

func newSoak(o *options) (*soak, error) {
	if err := os.MkdirAll(o.dir, 0o700); err != nil {
		return nil, err
	}
	ev, err := newEventLog(filepath.Join(o.dir, "events.jsonl"), os.Stderr)
	if err != nil {
		return nil, err
	}
	s := &soak{o: o, ev: ev, out: map[string]*jsonl{}}
	for _, name := range outputs {
		if s.out[name], err = newJSONL(filepath.Join(o.dir, name+".jsonl")); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (s *soak) close() {
	for _, name := range outputs {
		if err := s.out[name].close(); err != nil {
			fmt.Fprintf(os.Stderr, "soak: %s.jsonl: %v\n", name, err)
		}
	}
	_ = s.ev.out.close()
}

func run(ctx context.Context, o *options) error {
	s, err := newSoak(o)
	if err != nil {
		return err
	}
	defer s.close()
	s.sum.Started, s.sum.LoadBefore, s.sum.Machine = time.Now(), uptime(), machine()
	spec, err := s.spec()
	if err != nil {
		return err
	}
	j, err := newJob(spec, filepath.Join(o.dir, "soak"), s.ev)
	if err != nil {
		return err
	}
	defer j.stop(10 * time.Second) // on an early return; a no-op after stopJob
	s.ev.note("starting nats-server and %d agents (job %s, key %v)", o.world, spec.name, spec.keyFile != "")
	if err := j.start(ctx, 2*time.Minute); err != nil {
		return fmt.Errorf("start the job: %w", err)
	}
	s.soakPhase(ctx, j)
	s.stopJob(j)
	if o.replay && ctx.Err() == nil {
		if err := s.replayPhase(ctx, spec); err != nil {
			s.ev.note("replay: %v", err)
			s.sum.ReplayError = err.Error()
		}
	}
	s.sum.Interrupted = ctx.Err() != nil
	s.sum.Ended, s.sum.LoadAfter = time.Now(), uptime()
	return s.write()
}

// spec is the soak job's configuration, with a job key when the agent
// has --job-key-file and --job-key allows it.
func (s *soak) spec() (jobSpec, error) {
	o := s.o
	flags := []string{"--on-peer-loss", "wait", "--forward-time", o.forwardTime.String(), "--vocab", fmt.Sprint(o.vocab), "--log-format", "json"}
	flags = append(flags, strings.Fields(o.agentFlags)...)
	spec := jobSpec{bin: o.bin, natsConf: o.natsConf, name: "soak", world: o.world, flags: flags}
	help, _ := exec.Command(o.bin, "agent", "--help").CombinedOutput()
	has := strings.Contains(string(help), "--job-key-file")
	switch {
	case o.jobKey == "on" && !has:
		return spec, fmt.Errorf("--job-key on: %s agent has no --job-key-file flag", o.bin)
	case o.jobKey == "off" || !has:
		return spec, nil
	}
	key := make([]byte, 32)
	if _, err := crand.Read(key); err != nil {
		return spec, err
	}
	spec.keyFile = filepath.Join(o.dir, "job.key")
	return spec, os.WriteFile(spec.keyFile, []byte(base64.StdEncoding.EncodeToString(key)+"\n"), 0o600)
}

// soakPhase runs the load and the faults for the duration, waits for the
// requests in flight, then for the ranks to agree, and keeps the results.
func (s *soak) soakPhase(ctx context.Context, j *job) {
	o := s.o
	mctx, mstop := context.WithCancel(ctx)
	defer mstop()
	s.mon = &monitor{job: j, bus: j.client("soak-status"), pollEvery: o.pollEvery, sampleEvery: o.sampleEvery,
		statusOut: s.out["status"], samplesOut: s.out["procs"]}
	defer s.mon.bus.close()
	s.mon.start(mctx)
	to := s.sender(j, "soak-load")
	defer to.close()
	start := time.Now()
	end := start.Add(o.duration)
	s.load = &loadGen{to: to, vocab: o.vocab, rate: o.rate, maxInFlight: o.maxInFlight,
		rng: rand.New(rand.NewPCG(o.seed, 1)), out: s.out["requests"]}
	s.fault = &faulter{job: j, mon: s.mon, ev: s.ev, out: s.out["faults"], stopFor: o.stopFor, natsDown: o.natsDown,
		hostile: &hostile{job: j, messages: o.floodMessages, forged: o.forged, rng: rand.New(rand.NewPCG(o.seed, 2))}}
	slots := schedule(o.duration, o.warmup, o.cooldown, o.faultGap, strings.Split(o.faults, ","))
	s.ev.note("soak: %v of load at %.1f/s, %d faults from %v, every %v", o.duration, o.rate, len(slots), o.warmup, slotGap(slots))
	sendCtx, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { s.load.run(sendCtx, ctx) })
	wg.Go(func() { s.fault.run(ctx, start, end.Add(-o.cooldown), slots) })
	wg.Wait()
	s.sum.LoadEnded = time.Now()
	s.ev.note("load stopped; every request ended")
	s.settle(ctx, j)
	mstop()
	s.mon.wait()
}

// sender sends requests to job j by either path.
func (s *soak) sender(j *job, name string) *sender {
	return &sender{bus: j.client(name), subj: j.subj, gw: newGatewayClient(j.gwURL), timeout: s.o.requestTimeout}
}

func slotGap(slots []slot) time.Duration {
	if len(slots) < 2 {
		return 0
	}
	return slots[1].At - slots[0].At
}

// settle waits until every rank serves, idle, at one step, and keeps the
// ranks' last status: their digests must equal rank 0's.
func (s *soak) settle(ctx context.Context, j *job) {
	deadline := time.Now().Add(2 * time.Minute)
	var p statusPoll
	var st []api.RankStatus
	for time.Now().Before(deadline) && ctx.Err() == nil {
		p, st = s.mon.lastPoll()
		if quiescent(&p, j.spec.world) {
			break
		}
		_ = sleepCtx(ctx, 250*time.Millisecond)
	}
	s.sum.Final, s.sum.Settled = st, quiescent(&p, j.spec.world)
	s.ev.note("final status: settled %v, ranks %+v", s.sum.Settled, p.Ranks)
}

// quiescent reports whether every rank serves, idle, at rank 0's step and
// digest.
func quiescent(p *statusPoll, world int) bool {
	if _, ok := p.serving(world); !ok || p.Ranks[0].Rows != 0 {
		return false
	}
	for _, r := range p.Ranks {
		if r.Step != p.Ranks[0].Step || r.Digest != p.Ranks[0].Digest {
			return false
		}
	}
	return true
}

// stopJob stops the soak's job with SIGTERM and notes how its ranks ended.
func (s *soak) stopJob(j *job) {
	s.ev.note("stopping the job (SIGTERM to every rank, then the server)")
	from := len(s.ev.events())
	j.stop(30 * time.Second)
	for _, e := range s.ev.events()[from:] {
		if e.Kind == "exit" && (strings.HasPrefix(e.Proc, "rank") || e.Proc == j.gw.name) {
			s.sum.FinalExits = append(s.sum.FinalExits, e)
		}
	}
}

// replayPhase runs every request that finished with a seed (the soak's,
// or the gateway's) again on a fresh job with the same flags, by the same
// path, and compares.
func (s *soak) replayPhase(ctx context.Context, spec jobSpec) error {
	recs, _ := s.load.results()
	todo := toReplay(recs)
	spec.name, spec.procs = "soak-replay", "replay-"
	j, err := newJob(spec, filepath.Join(s.o.dir, "replay"), s.ev)
	if err != nil {
		return err
	}
	defer j.stop(30 * time.Second)
	s.ev.note("replay: %d seeded requests on a fresh job (%d through its gateway)", len(todo), countPath(todo, pathGateway))
	if err := j.start(ctx, 2*time.Minute); err != nil {
		return fmt.Errorf("start the replay job: %w", err)
	}
	to := s.sender(j, "soak-replay")
	defer to.close()
	start := time.Now()
	res := replayAll(ctx, to, todo, s.o.replayConc, s.out["replay"])
	c := compareReplay(recs, res)
	s.sum.Comparison = &c
	s.ev.note("replay: %d compared in %v, %d mismatches", c.Compared, time.Since(start).Round(time.Second), len(c.Mismatches))
	return nil
}

// uptime is `uptime`'s line (the load averages), or /proc/loadavg.
func uptime() string {
	if out, err := exec.Command("uptime").Output(); err == nil {
		return strings.TrimSpace(string(out))
	}
	b, _ := os.ReadFile("/proc/loadavg")
	return "loadavg " + strings.TrimSpace(string(b))
}

// machine describes the host: CPUs, memory, kernel.
func machine() string {
	var parts []string
	if out, err := exec.Command("nproc").Output(); err == nil {
		parts = append(parts, strings.TrimSpace(string(out))+" CPUs")
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		if line, _, ok := strings.Cut(string(b), "\n"); ok {
			parts = append(parts, strings.Join(strings.Fields(line), " "))
		}
	}
	if out, err := exec.Command("uname", "-sr").Output(); err == nil {
		parts = append(parts, strings.TrimSpace(string(out)))
	}
	return strings.Join(slices.Clip(parts), ", ")
}
