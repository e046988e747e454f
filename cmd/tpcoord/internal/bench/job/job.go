package job

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/broadcast/natsbus"
	"github.com/tpcoord/tpcoord/coordinator/launch"
)

// flightSteps is the flight recorder size a job's agents get, so that rank
// 0's dump holds every step of a bench's run.
const flightSteps = 1 << 16

// stopTimeout is how long a job gets to stop after SIGTERM.
const stopTimeout = 30 * time.Second

// ReadyInfo is launch's ready file (--ready-file).
type ReadyInfo = launch.ReadyInfo

// Launch says which job to start.
type Launch struct {
	Self string   // the tpcoord binary
	CPUs string   // run launch under `taskset -c CPUs` when set
	Dir  string   // for the ready file and the flight recorder's dumps
	Name string   // tells this job's files in Dir apart
	Args []string // launch's flags after the ones Start sets
	// Plain runs launch with its own defaults (only --ready-file and Args
	// set: no flight recorder, log or trace flags) and does not connect
	// to the job's bus: for a bench of launch itself.
	Plain bool
	// Poll is how often Start looks for the ready file (0: 50 ms).
	Poll time.Duration
}

// Job is a local job that a benchmark starts with `tpcoord launch` and
// stops again. Its owner calls Stop (or Fail, or StopQuietly) once.
type Job struct {
	cmd       *exec.Cmd
	logs      syncBuffer // launch's and the agents' logs, shown on failure
	exited    chan struct{}
	waitErr   error // valid once exited is closed
	ready     ReadyInfo
	flightDir string
	nc        *natsbus.Conn
	subj      broadcast.Subjects
	started   time.Time // just before launch was started
	readyAt   time.Time // when Start first read a complete ready file
}

// Start runs `l.Self launch ...` with its flight recorder in l.Dir, waits
// for its ready file and connects to its NATS server (with l.Plain: only
// the first two, and launch's own defaults).
func Start(ctx context.Context, l Launch) (*Job, error) {
	j := &Job{exited: make(chan struct{}), flightDir: filepath.Join(l.Dir, "flight-"+l.Name)}
	if err := os.MkdirAll(j.flightDir, 0o755); err != nil {
		return nil, err
	}
	readyFile := filepath.Join(l.Dir, "ready-"+l.Name+".json")
	args := []string{"launch", "--ready-file", readyFile}
	if !l.Plain {
		args = append(args, "--flight-dir", j.flightDir, "--flight-steps", strconv.Itoa(flightSteps),
			"--log-level", "warn", "--trace-every", "0")
	}
	args = append(args, l.Args...)
	bin := l.Self
	if l.CPUs != "" {
		bin, args = "taskset", append([]string{"-c", l.CPUs, l.Self}, args...)
	}
	j.cmd = Command(bin, args, os.Environ())
	j.cmd.Stdout, j.cmd.Stderr = &j.logs, &j.logs
	j.started = time.Now()
	if err := j.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { j.waitErr = j.cmd.Wait(); close(j.exited) }() // owned by the Job: Stop waits for it
	info, err := j.waitReady(ctx, readyFile, cmp.Or(l.Poll, 50*time.Millisecond))
	if err != nil {
		return nil, j.Fail(err)
	}
	j.ready = info
	if l.Plain {
		return j, nil
	}
	if j.nc, err = natsbus.Connect(natsbus.Config{URL: info.NATSURL, Name: "tpcoord-bench"}); err != nil {
		return nil, j.Fail(err)
	}
	j.subj = broadcast.Subjects{Prefix: "tpc", Job: info.Job}
	return j, nil
}

// Ready is what launch wrote to its ready file.
func (j *Job) Ready() ReadyInfo { return j.ready }

// TimeToReady is the time from launch's start to the first poll that read
// its complete ready file (late by up to Launch.Poll).
func (j *Job) TimeToReady() time.Duration { return j.readyAt.Sub(j.started) }

// PID is launch's process ID.
func (j *Job) PID() int { return j.cmd.Process.Pid }

// Bus is the job's NATS connection, which the Job owns (Stop closes it).
func (j *Job) Bus() broadcast.Transport { return j.nc }

// Subjects are the job's NATS subjects.
func (j *Job) Subjects() broadcast.Subjects { return j.subj }

// waitReady polls for launch's ready file every poll until launch exits
// or ctx ends.
func (j *Job) waitReady(ctx context.Context, path string, poll time.Duration) (ReadyInfo, error) {
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		if data, err := os.ReadFile(path); err == nil {
			var info ReadyInfo
			if json.Unmarshal(data, &info) == nil && info.NATSURL != "" {
				j.readyAt = time.Now()
				return info, nil
			}
		}
		select {
		case <-ctx.Done():
			return ReadyInfo{}, fmt.Errorf("launch not ready: %w", ctx.Err())
		case <-j.exited:
			if j.waitErr == nil {
				return ReadyInfo{}, errors.New("launch exited (status 0) before it was ready")
			}
			return ReadyInfo{}, fmt.Errorf("launch exited before it was ready: %w", j.waitErr)
		case <-t.C:
		}
	}
}

// Stop sends SIGTERM to launch and waits for it, killing it after 30s.
func (j *Job) Stop() error {
	if j.nc != nil {
		j.nc.Close()
	}
	_ = j.cmd.Process.Signal(syscall.SIGTERM)
	timer := time.NewTimer(stopTimeout)
	defer timer.Stop()
	select {
	case <-j.exited:
		return j.waitErr
	case <-timer.C:
		_ = j.cmd.Process.Kill()
		<-j.exited
		return fmt.Errorf("launch did not stop within %v of SIGTERM; killed", stopTimeout)
	}
}

// Fail stops the job and returns err with the tail of its logs.
func (j *Job) Fail(err error) error {
	_ = j.Stop()
	return fmt.Errorf("%w\nlaunch output (tail):\n%s", err, Tail(j.logs.String(), 4000))
}

// StopQuietly stops the job, reporting a non-zero exit on progress only,
// after label.
func (j *Job) StopQuietly(progress io.Writer, label string) {
	if err := j.Stop(); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 0 {
			fmt.Fprintf(progress, "%s: launch stopped with %v\n", label, err)
		}
	}
}

// StepTimings asks rank 0 (the first of the ready file's pids) to dump its
// flight recorder and returns its steps that started at or after since
// and had rows.
func (j *Job) StepTimings(ctx context.Context, since time.Time) ([]api.StepTiming, error) {
	if len(j.ready.PIDs) == 0 {
		return nil, errors.New("the ready file lists no pids")
	}
	if err := syscall.Kill(j.ready.PIDs[0], syscall.SIGUSR1); err != nil {
		return nil, fmt.Errorf("signal rank 0: %w", err)
	}
	return readDump(ctx, j.flightDir, "job-"+j.ready.Job+"-rank-0", since)
}
