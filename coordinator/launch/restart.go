package launch

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"time"

	"github.com/tpcoord/tpcoord/internal/rankproc"
)

// afterExit handles a rank's exit while the job runs. A rank that failed
// is started again if Config.MaxRestarts allows (nil: the job goes on);
// otherwise its death stops the job (died's error). errStopped if ctx
// ends meanwhile.
func (s *Supervisor) afterExit(ctx context.Context, e childExit) error {
	if !s.restartable(e) {
		return s.died(e)
	}
	now := time.Now()
	recent := s.recentRestarts(e.rank, now)
	if len(recent) >= s.cfg.MaxRestarts {
		s.log.Warn(fmt.Sprintf("rank %d failed again after %d restarts in %v; not starting it again", e.rank, len(recent), RestartWindow),
			"failed_rank", e.rank, "max_restarts", s.cfg.MaxRestarts)
		return s.died(e)
	}
	s.restarts[e.rank] = append(recent, now)
	s.gone[e.rank] = true
	cause := rankproc.ReadCause(s.causeFile(e.rank))
	_ = os.Remove(s.causeFile(e.rank)) // a later death must not read it again
	s.log.Warn(fmt.Sprintf("rank %d (pid %d) died; starting it again", e.rank, e.pid), "failed_rank", e.rank, "pid", e.pid,
		"how", exitHow(e), "cause", cmp.Or(cause, "none reported"), "restart", len(recent)+1, "max_restarts", s.cfg.MaxRestarts)
	delay := time.NewTimer(RestartDelay)
	defer delay.Stop()
	select {
	case <-ctx.Done():
		return errStopped
	case <-delay.C:
	}
	if ctx.Err() != nil { // both were ready: the stop wins
		return errStopped
	}
	if err := s.spawn(e.rank, s.rankArgs(e.rank, s.rank0, s.serve)); err != nil {
		return err
	}
	s.gone[e.rank] = false
	s.cause.reset() // whatever rank 0 said of this death is not a later one's cause
	return s.rewriteReady()
}

// restartable: restarts are on, and the rank failed (not exit 0, which a
// rank gives only when asked to stop, nor 2, a configuration error that
// would fail again), as systemd's Restart=on-failure with
// RestartPreventExitStatus=2 has it.
func (s *Supervisor) restartable(e childExit) bool {
	return s.cfg.MaxRestarts > 0 && e.err != nil && exitCode(e.err) != 2
}

// recentRestarts are rank r's restarts within RestartWindow of now.
func (s *Supervisor) recentRestarts(r int, now time.Time) []time.Time {
	var out []time.Time
	for _, t := range s.restarts[r] {
		if now.Sub(t) < RestartWindow {
			out = append(out, t)
		}
	}
	return out
}

// pids are the ranks' current processes, by rank.
func (s *Supervisor) pids() []int {
	pids := make([]int, len(s.children))
	for i, c := range s.children {
		pids[i] = c.cmd.Process.Pid
	}
	return pids
}

// rewriteReady gives the ready file, if the job has one and is ready, the
// ranks' processes after a restart.
func (s *Supervisor) rewriteReady() error {
	if s.cfg.ReadyFile == "" || s.info == nil {
		return nil
	}
	info := *s.info
	info.PIDs = s.pids()
	return writeReadyFile(s.cfg.ReadyFile, info)
}
