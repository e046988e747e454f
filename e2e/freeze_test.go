package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/broadcast/natsbus"
	"github.com/tpcoord/tpcoord/internal/poll"
	"github.com/tpcoord/tpcoord/rank/client"
)

// TestFrozenRank0KeepsItsClients: rank 0 SIGSTOPped for longer than the
// client timeout while requests stream (through the Go client, which
// sends keepalives all along). After SIGCONT rank 0 must not blame the
// clients for its own stall: every request finishes with all its tokens,
// the same as an undisturbed run of the same seeded requests, and none is
// cancelled as "client went away". The followers' heartbeat timeout and
// membership's suspicion are set longer than the freeze, so that the
// world stays as it is.
func TestFrozenRank0KeepsItsClients(t *testing.T) {
	const freeze = 3 * time.Second // the client timeout is 2 s
	j := launch(t, "--nproc", "2", "--job", "e2e-frozen0", "--forward-time", "5ms", "--heartbeat-timeout", "15s",
		"--gossip-probe-interval", "1s", "--gossip-suspicion-mult", "15")
	nc, subj := connect(t, j)
	reqs := frozenWorkload(6)
	done := make(chan []frozenResult, 1)
	go func() { done <- generateAll(nc, subj, reqs) }()
	poll.UntilDetail(t, 60*time.Second, "every request decoding", func() (bool, string) {
		ranks, err := j.status()
		return err == nil && len(ranks) == 2 && ranks[0].Rows == len(reqs) && ranks[0].Step > 10, fmt.Sprintf("%+v %v", ranks, err)
	})
	rank0 := j.info.PIDs[0]
	if err := syscall.Kill(rank0, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(rank0, syscall.SIGCONT) })
	stopped := time.Now()
	// The freeze's length is what is tested: it is waited out, with rank
	// 0 seen stopped.
	poll.UntilDetail(t, time.Minute, "rank 0 stopped for longer than the client timeout", func() (bool, string) {
		state := procState(rank0)
		return state == 'T' && time.Since(stopped) > freeze, fmt.Sprintf("state %c", state)
	})
	if err := syscall.Kill(rank0, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	var got []frozenResult
	select {
	case got = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("requests not done 2 minutes after the thaw")
	}
	want := generateAll(nc, subj, reqs) // the same requests, undisturbed
	for i, g := range got {
		switch {
		case g.err != nil:
			t.Errorf("request %d after rank 0's freeze: %v", i, g.err)
		case want[i].err != nil:
			t.Errorf("request %d, undisturbed: %v", i, want[i].err)
		case g.rep.FinishReason != api.FinishLength || fmt.Sprint(g.rep.Tokens) != fmt.Sprint(want[i].rep.Tokens):
			t.Errorf("request %d: finish %q, %d tokens, want %d tokens as the undisturbed run", i, g.rep.FinishReason, len(g.rep.Tokens), len(want[i].rep.Tokens))
		}
	}
	if log := j.log.String(); strings.Contains(log, "client went away") || !strings.Contains(log, "this process was frozen") {
		t.Errorf("rank 0 blamed its clients, or did not see its freeze:\n%s", tail(log, 20))
	}
}

type frozenResult struct {
	rep *api.GenerateReply
	err error
}

// frozenWorkload is n seeded requests long enough (at 5 ms a step) to be
// in flight across the freeze.
func frozenWorkload(n int) []*api.GenerateRequest {
	reqs := make([]*api.GenerateRequest, n)
	for i := range reqs {
		p := api.DefaultParams()
		seed := uint64(100 + i)
		p.Temperature, p.TopK, p.Seed, p.IgnoreEOS = 0.8, 50, &seed, true
		reqs[i] = &api.GenerateRequest{PromptTokenIDs: []int32{int32(3 + i), 14, 15}, MaxTokens: 1500 + 50*i, Params: p}
	}
	return reqs
}

// generateAll runs reqs at once through the Go client (with keepalives).
func generateAll(nc *natsbus.Conn, subj broadcast.Subjects, reqs []*api.GenerateRequest) []frozenResult {
	return generateAllWithin(nc, subj, reqs, 3*time.Minute)
}

// generateAllWithin is generateAll with a deadline of d.
func generateAllWithin(nc *natsbus.Conn, subj broadcast.Subjects, reqs []*api.GenerateRequest, d time.Duration) []frozenResult {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	out := make([]frozenResult, len(reqs))
	var wg sync.WaitGroup
	for i, r := range reqs {
		wg.Go(func() {
			rep, err := client.Generate(ctx, nc, subj, r, nil)
			if err == nil && rep == nil {
				err = errors.New("no reply")
			}
			out[i] = frozenResult{rep, err}
		})
	}
	wg.Wait()
	return out
}

// procState is pid's state letter in /proc (R, S, T, Z...), 0 if unknown.
func procState(pid int) byte {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(data)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2]
	}
	return 0
}
