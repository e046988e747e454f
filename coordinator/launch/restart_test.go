package launch

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/broadcast/api"
)

// TestRestartPolicy: a rank that fails is started again, at most
// MaxRestarts times in the window; then its death stops the job, naming
// it. A rank that exits 0 (asked to stop) or 2 (a configuration error) is
// not started again. The ranks are real processes (/bin/false, /bin/true).
func TestRestartPolicy(t *testing.T) {
	for _, tc := range []struct {
		bin      string
		restarts int // how many times it is started again
	}{{"/bin/false", 2}, {"/bin/true", 0}, {"/bin/sh", 0}} {
		s := &Supervisor{cfg: Config{NProc: 1, Self: tc.bin, MaxRestarts: 2},
			log: slog.New(slog.DiscardHandler), exits: make(chan childExit, 1), gone: map[int]bool{}, cause: newFirstCause(),
			restarts: map[int][]time.Time{}, keyDir: t.TempDir()}
		var args []string // ignored by false and true; sh exits 2
		if tc.bin == "/bin/sh" {
			args = []string{"-c", "exit 2"}
		}
		if err := s.spawn(0, args); err != nil {
			t.Fatal(err)
		}
		started := 0
		for {
			err := s.afterExit(context.Background(), <-s.exits)
			if err == nil {
				started++
				continue
			}
			var died *RankDiedError
			if !errors.As(err, &died) || died.Rank != 0 {
				t.Errorf("%s: %v, want rank 0's death", tc.bin, err)
			}
			break
		}
		s.wg.Wait()
		if started != tc.restarts {
			t.Errorf("%s: started again %d times, want %d", tc.bin, started, tc.restarts)
		}
	}
}

// TestCauseForgottenOnRestart: what rank 0 said of a death that launch
// answered by starting the rank again is not the cause of a later stop.
func TestCauseForgottenOnRestart(t *testing.T) {
	c := newFirstCause()
	data, _ := json.Marshal(api.Control{Kind: api.ControlPeerLost, Reason: "peer lost: rank 1: no heartbeat"})
	c.observe(&broadcast.Msg{Data: data})
	if got := c.wait(0); got == "" {
		t.Fatal("the reason was not kept")
	}
	c.reset()
	if got := c.wait(10 * time.Millisecond); got != "" {
		t.Fatalf("after a restart the cause is still %q", got)
	}
	data, _ = json.Marshal(api.Control{Kind: api.ControlPeerLost, Reason: "peer lost: rank 2"})
	c.observe(&broadcast.Msg{Data: data})
	if got := c.wait(time.Second); got != "peer lost: rank 2" {
		t.Fatalf("the next death's cause: %q", got)
	}
}
