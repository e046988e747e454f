package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/broadcast/natsbus"
	"github.com/tpcoord/tpcoord/coordinator/launch"
	"github.com/tpcoord/tpcoord/rank/client"
	"github.com/tpcoord/tpcoord/sampler"
)

// benchJob is a local job that a benchmark starts with `tpcoord launch`
// and stops again: bench e2e and bench step share it.
type benchJob struct {
	cmd       *exec.Cmd
	logs      bsSyncBuffer // launch's and the agents' logs, shown on failure
	exited    chan struct{}
	waitErr   error // valid once exited is closed
	info      launch.ReadyInfo
	flightDir string
	nc        *natsbus.Conn
	subj      broadcast.Subjects
}

// runAsTPCoordEnv is set in the environment of every process a bench
// spawns from os.Executable(): launch and its agents, the broadcast
// publisher, server and followers. The tpcoord binary ignores it; a test
// binary (os.Executable() under go test) runs the tpcoord command line
// instead of the tests when it sees it (selfexec_test.go).
const runAsTPCoordEnv = "TPC_RUN_AS_TPCOORD"

// startBenchJob runs `self launch args...` (under `taskset -c cpus` when
// cpus is set) with its flight recorder in dir, waits for its ready file and
// connects to its NATS server.
func startBenchJob(ctx context.Context, self, cpus, dir, name string, args []string) (*benchJob, error) {
	j := &benchJob{exited: make(chan struct{}), flightDir: filepath.Join(dir, "flight-"+name)}
	if err := os.MkdirAll(j.flightDir, 0o755); err != nil {
		return nil, err
	}
	readyFile := filepath.Join(dir, "ready-"+name+".json")
	args = append([]string{"launch", "--ready-file", readyFile, "--flight-dir", j.flightDir,
		"--flight-steps", strconv.Itoa(bsFlightSteps), "--log-level", "warn", "--trace-every", "0"}, args...)
	bin := self
	if cpus != "" {
		bin, args = "taskset", append([]string{"-c", cpus, self}, args...)
	}
	j.cmd = exec.Command(bin, args...)
	j.cmd.Env = append(os.Environ(), runAsTPCoordEnv+"=1")
	j.cmd.Stdout, j.cmd.Stderr = &j.logs, &j.logs
	if err := j.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { j.waitErr = j.cmd.Wait(); close(j.exited) }()
	info, err := waitReadyFile(ctx, readyFile, j.exited, &j.waitErr)
	if err != nil {
		return nil, j.fail(err)
	}
	j.info = info
	if j.nc, err = natsbus.Connect(natsbus.Config{URL: info.NATSURL, Name: "tpcoord-bench"}); err != nil {
		return nil, j.fail(err)
	}
	j.subj = broadcast.Subjects{Prefix: "tpc", Job: info.Job}
	return j, nil
}

// stop sends SIGTERM to launch and waits for it, killing it after 30s.
func (j *benchJob) stop() error {
	if j.nc != nil {
		j.nc.Close()
	}
	_ = j.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-j.exited:
		return j.waitErr
	case <-time.After(30 * time.Second):
		_ = j.cmd.Process.Kill()
		<-j.exited
		return errors.New("launch did not stop within 30s of SIGTERM; killed")
	}
}

// fail stops the job and returns err with the tail of its logs.
func (j *benchJob) fail(err error) error {
	_ = j.stop()
	return fmt.Errorf("%w\nlaunch output (tail):\n%s", err, tail(j.logs.String(), 4000))
}

// stopQuietly stops the job, reporting a non-zero exit on progress only.
func (j *benchJob) stopQuietly(progress io.Writer, label string) {
	if err := j.stop(); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 0 {
			fmt.Fprintf(progress, "%s: launch stopped with %v\n", label, err)
		}
	}
}

// stepTimings asks rank 0 (launch's pids are in rank order) to dump its
// flight recorder and returns the steps that started at or after since.
func (j *benchJob) stepTimings(ctx context.Context, since time.Time) ([]client.StepTiming, error) {
	if len(j.info.PIDs) == 0 {
		return nil, errors.New("the ready file lists no pids")
	}
	if err := syscall.Kill(j.info.PIDs[0], syscall.SIGUSR1); err != nil {
		return nil, fmt.Errorf("signal rank 0: %w", err)
	}
	return bsReadDump(ctx, j.flightDir, "job-"+j.info.Job+"-rank-0", since)
}

// submitBatch submits n concurrent requests of max_tokens tokens each
// (ignore_eos, the given temperature, seeds from seedBase) and waits for
// all; it returns the output tokens received and the wall time.
func submitBatch(ctx context.Context, tr broadcast.Transport, subj broadcast.Subjects, n, tokens, vocab int, temperature float32, seedBase uint64) (int, time.Duration, error) {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		total int
		first error
	)
	start := time.Now()
	for i := range n {
		wg.Go(func() {
			seed := seedBase + uint64(i)
			p := sampler.DefaultParams()
			p.Temperature, p.IgnoreEOS, p.Seed = temperature, true, &seed
			req := &client.GenerateRequest{
				PromptTokenIDs: []int32{int32((1 + 7*i) % vocab), int32((100 + 13*i) % vocab), int32((1000 + 31*i) % vocab)},
				MaxTokens:      tokens, Params: p,
			}
			rep, err := client.Generate(ctx, tr, subj, req, nil)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil && first == nil:
				first = fmt.Errorf("request %d: %w", i, err)
			case err == nil:
				total += len(rep.Tokens)
			}
		})
	}
	wg.Wait()
	return total, time.Since(start), first
}

// writeJSONLine writes v as one line of JSON.
func writeJSONLine(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}
