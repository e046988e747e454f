package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tpcoord/tpcoord/broadcast/api"
)

// monitor polls the job's status and samples its processes' resources
// until its context ends.
type monitor struct {
	job         *job
	bus         *clientBus
	pollEvery   time.Duration
	sampleEvery time.Duration
	statusOut   *jsonl
	samplesOut  *jsonl

	mu      sync.Mutex
	polls   []statusPoll
	latest  []api.RankStatus
	samples []procSample
	wg      sync.WaitGroup
}

func (m *monitor) start(ctx context.Context) {
	m.wg.Go(func() { m.pollLoop(ctx) })
	m.wg.Go(func() { m.sampleLoop(ctx) })
}

func (m *monitor) wait() { m.wg.Wait() }

func (m *monitor) pollLoop(ctx context.Context) {
	for ctx.Err() == nil {
		p, st := pollStatus(ctx, m.bus, m.job.subj, m.job.spec.world)
		if ctx.Err() != nil {
			return
		}
		m.statusOut.write(&p)
		m.mu.Lock()
		m.polls = append(m.polls, p)
		m.latest = st
		m.mu.Unlock()
		_ = sleepCtx(ctx, m.pollEvery)
	}
}

// lastPoll is the latest status round and the ranks' full answers.
func (m *monitor) lastPoll() (statusPoll, []api.RankStatus) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.polls) == 0 {
		return statusPoll{}, nil
	}
	return m.polls[len(m.polls)-1], m.latest
}

func (m *monitor) sampleLoop(ctx context.Context) {
	procs := append([]*proc{m.job.nats.p, m.job.gw}, m.job.ranks...)
	for ctx.Err() == nil {
		for _, p := range procs {
			m.sample(p)
		}
		_ = sleepCtx(ctx, m.sampleEvery)
	}
}

func (m *monitor) sample(p *proc) {
	pid, inc := p.pid()
	if pid == 0 {
		return
	}
	rss, threads, fds, err := readProc(pid)
	if err != nil {
		return // it exited meanwhile
	}
	s := procSample{T: time.Now(), Proc: p.name, Inc: inc, PID: pid, RSSKiB: rss, FDs: fds, Threads: threads}
	m.samplesOut.write(&s)
	m.mu.Lock()
	m.samples = append(m.samples, s)
	m.mu.Unlock()
}

func (m *monitor) results() ([]statusPoll, []procSample) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]statusPoll(nil), m.polls...), append([]procSample(nil), m.samples...)
}

// readProc reads a process's resident set and threads from
// /proc/<pid>/status and counts its open file descriptors in /proc/<pid>/fd.
func readProc(pid int) (rssKiB int64, threads, fds int, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		fields := strings.Fields(v)
		if len(fields) == 0 {
			continue
		}
		switch k {
		case "VmRSS":
			rssKiB, _ = strconv.ParseInt(fields[0], 10, 64)
		case "Threads":
			threads, _ = strconv.Atoi(fields[0])
		}
	}
	if err := sc.Err(); err != nil {
		return 0, 0, 0, err
	}
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return 0, 0, 0, err
	}
	return rssKiB, threads, len(ents), nil
}
