package e2e

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tpcoord/tpcoord/internal/poll"
)

// request is one generate call of a test workload.
type request struct {
	prompt    string
	maxTokens int
	seed      int
	extra     []string // more generate flags
}

func workload(n int) []request {
	out := make([]request, n)
	for i := range out {
		out[i] = request{prompt: fmt.Sprintf("%d,%d,%d", 1+7*i, 100+13*i, 1000+31*i), maxTokens: 12 + 4*i, seed: 1000 + i}
	}
	return out
}

// runAll submits every request at once and returns the results in order.
func runAll(t *testing.T, j *job, reqs []request) []generated {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	results := make([]generated, len(reqs))
	errs := make([]error, len(reqs))
	var wg sync.WaitGroup
	for i, r := range reqs {
		wg.Go(func() {
			results[i], errs[i] = j.generate(ctx, append([]string{"--prompt", r.prompt, "--max-tokens", fmt.Sprint(r.maxTokens),
				"--seed", fmt.Sprint(r.seed), "--temperature", "0.8", "--top-k", "50", "--top-p", "0.95"}, r.extra...)...)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return results
}

func checkResults(t *testing.T, reqs []request, got []generated) {
	t.Helper()
	for i, g := range got {
		switch g.FinishReason {
		case "length":
			if len(g.Tokens) != reqs[i].maxTokens {
				t.Errorf("request %d: finish_reason length with %d tokens, max_tokens %d", i, len(g.Tokens), reqs[i].maxTokens)
			}
		case "stop":
			if len(g.Tokens) == 0 || len(g.Tokens) > reqs[i].maxTokens || g.Tokens[len(g.Tokens)-1] != 0 {
				t.Errorf("request %d: finish_reason stop but tokens %v (EOS is 0)", i, g.Tokens)
			}
		default:
			t.Errorf("request %d: finish_reason %q", i, g.FinishReason)
		}
	}
}

// TestLockstepFourRanks: 4 ranks, 8 concurrent requests, every request gets
// its tokens, every rank ends at the same step with the same digest, and
// SIGTERM stops everything with exit 0 and no rank left behind.
func TestLockstepFourRanks(t *testing.T) {
	j := launch(t, "--nproc", "4", "--job", "e2e-lockstep", "--forward-time", "5ms")
	reqs := workload(8)
	checkResults(t, reqs, runAll(t, j, reqs))

	poll.UntilDetail(t, 60*time.Second, "all ranks at the same step and digest", func() (bool, string) {
		ranks, err := j.status()
		if err != nil {
			return false, err.Error()
		}
		if len(ranks) != 4 {
			return false, fmt.Sprintf("%d ranks answered: %+v", len(ranks), ranks)
		}
		for _, r := range ranks {
			if r.Step == 0 || r.Step != ranks[0].Step || r.Digest != ranks[0].Digest || r.State != "running" {
				return false, fmt.Sprintf("%+v", ranks)
			}
		}
		return true, ""
	})

	took, err := j.stop(syscall.SIGTERM, 5*time.Second)
	if err != nil {
		t.Fatalf("launch exited with %v after SIGTERM", err)
	}
	t.Logf("SIGTERM to exit: %v", took.Round(time.Millisecond))
	for _, pid := range j.info.PIDs {
		if alive(pid) {
			t.Errorf("rank pid %d still running after launch exited", pid)
		}
	}
}

// TestKilledRankStopsJob: SIGKILL one rank; launch stops the rest and exits
// non-zero naming that rank.
func TestKilledRankStopsJob(t *testing.T) {
	j := launch(t, "--nproc", "4", "--job", "e2e-kill", "--forward-time", "5ms")
	if err := killDuringGeneration(t, j, 4, 2, 90*time.Second); err == nil || !strings.Contains(err.Error(), "rank 2") {
		t.Errorf("requester's error %v does not name rank 2", err)
	}
}

// TestKilledRank0StopsJob: SIGKILL rank 0, once with the NATS server in
// launch (the default) and once hosted by rank 0 (--nats-in-rank0), whose
// death then takes the bus with it. launch must stop the followers and exit
// non-zero naming rank 0 either way, and a requester must not wait out its
// --timeout (10 minutes): it has no one to answer it, and says so.
func TestKilledRank0StopsJob(t *testing.T) {
	for _, mode := range []string{"server-in-launch", "server-in-rank0"} {
		t.Run(mode, func(t *testing.T) {
			args := []string{"--nproc", "3", "--job", "e2e-kill0", "--forward-time", "5ms"}
			if mode == "server-in-rank0" {
				args = append(args, "--nats-in-rank0")
			}
			j := launch(t, args...)
			pid := j.info.PIDs[0]
			start := time.Now()
			err := killDuringGeneration(t, j, 3, 0, 10*time.Minute)
			t.Logf("the requester's wait ended %v after rank 0's SIGKILL: %v", time.Since(start).Round(10*time.Millisecond), err)
			if mode == "server-in-launch" {
				// launch answers the dead rank 0's clients, naming it.
				if want := fmt.Sprintf("rank 0 (pid %d) died", pid); err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("requester's error after rank 0 died: %v, want one saying %q", err, want)
				}
				return
			}
			msg := fmt.Sprint(err)
			gone := strings.Contains(msg, "rank 0 of job") && strings.Contains(msg, "is gone")
			busLost := strings.Contains(msg, "connection to NATS lost")
			if err == nil || !gone && !busLost {
				t.Errorf("requester's error after rank 0 died: %v, want rank 0 gone or the bus lost", err)
			}
		})
	}
}

// killDuringGeneration starts a long request on j (nranks ranks), SIGKILLs
// rank victim once decoding is under way, and checks that launch exits
// non-zero naming it and leaves no rank running. It returns the
// requester's error (the request's --timeout bounds its wait).
func killDuringGeneration(t *testing.T, j *job, nranks, victim int, timeout time.Duration) error {
	t.Helper()
	genErr := longRequest(t, j, nranks, timeout)
	pid := j.info.PIDs[victim]
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err := j.wait(60 * time.Second)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() == 0 {
		t.Fatalf("launch exit: %v, want a non-zero exit", err)
	}
	if want := fmt.Sprintf("rank %d (pid %d) died", victim, pid); !strings.Contains(j.log.String(), want) {
		t.Errorf("launch output does not name the dead rank (%q)", want)
	}
	for _, p := range j.info.PIDs {
		if alive(p) {
			t.Errorf("rank pid %d still running after launch exited", p)
		}
	}
	select {
	case err := <-genErr:
		return err
	case <-time.After(2 * time.Minute):
		t.Fatal("requester still waiting 2 minutes after launch exited")
		return nil
	}
}

// longRequest starts a generate on j that decodes far longer than a test
// lasts (with --timeout timeout), waits until nranks ranks are decoding it,
// and returns where its error will arrive.
func longRequest(t *testing.T, j *job, nranks int, timeout time.Duration) <-chan error {
	t.Helper()
	genErr := make(chan error, 1)
	go func() {
		ctx, cancel := contextWithTimeout(timeout + time.Minute)
		defer cancel()
		_, err := j.generate(ctx, "--prompt", "3,1,4", "--max-tokens", "50000", "--ignore-eos", "--timeout", timeout.String(), "--resume-window", "0")
		genErr <- err
	}()
	poll.UntilDetail(t, 60*time.Second, "decoding under way", func() (bool, string) {
		ranks, err := j.status()
		return err == nil && len(ranks) == nranks && ranks[0].Step > 10, fmt.Sprintf("%+v %v", ranks, err)
	})
	return genErr
}

// TestSameRequestsSameTokens: two separate runs of the same requests give
// the same tokens.
func TestSameRequestsSameTokens(t *testing.T) {
	reqs := workload(4)
	var runs [2][]generated
	for i := range runs {
		j := launch(t, "--nproc", "2", "--job", fmt.Sprintf("e2e-determinism-%d", i), "--forward-time", "2ms")
		runs[i] = runAll(t, j, reqs)
		if _, err := j.stop(syscall.SIGTERM, 30*time.Second); err != nil {
			t.Fatalf("run %d: launch exited with %v", i, err)
		}
	}
	checkResults(t, reqs, runs[0])
	for i := range reqs {
		if fmt.Sprint(runs[0][i]) != fmt.Sprint(runs[1][i]) {
			t.Errorf("request %d: run 1 %v, run 2 %v", i, runs[0][i], runs[1][i])
		}
	}
}

// TestFrozenFollowerNamed: a follower frozen with SIGSTOP is the cause
// launch names when the job stops, not rank 0, which exits (status 3)
// because it lost that follower.
func TestFrozenFollowerNamed(t *testing.T) {
	j := launch(t, "--nproc", "3", "--job", "e2e-freeze", "--forward-time", "5ms")
	genErr := longRequest(t, j, 3, 10*time.Minute)
	victim := j.info.PIDs[1]
	if err := syscall.Kill(victim, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(victim, syscall.SIGCONT) })
	err := j.wait(60 * time.Second)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() == 0 {
		t.Fatalf("launch exit: %v, want a non-zero exit", err)
	}
	// Launch's one ERROR names the rank that died (rank 0, which stopped
	// the job) with its cause, the frozen rank 1; a WARN may follow, for
	// the frozen rank killed after the grace.
	var stopLine string
	for _, l := range strings.Split(j.log.String(), "\n") {
		if strings.Contains(l, "level=ERROR") && strings.Contains(l, "stopping the others") {
			stopLine = l
		}
	}
	if !strings.Contains(stopLine, `cause="peer lost: rank 1: no heartbeat`) {
		t.Errorf("launch's error %q, want the frozen rank 1 named as the cause:\n%s", stopLine, j.log.String())
	}
	if err := <-genErr; err == nil || !strings.Contains(err.Error(), "rank 1") {
		t.Errorf("requester's error %v, want one naming rank 1", err)
	}
}
