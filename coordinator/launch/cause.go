package launch

import (
	"encoding/json"
	"errors"
	"os/exec"
	"sync"
	"time"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/broadcast/api"
)

// firstCause keeps the first reason rank 0 gave on the control subject for
// stopping the job (a lost peer, an abort).
type firstCause struct {
	mu     sync.Mutex
	reason string
	heard  chan struct{} // closed when reason is set
}

func newFirstCause() *firstCause { return &firstCause{heard: make(chan struct{})} }

// observe is the control subscription's handler.
func (c *firstCause) observe(m *broadcast.Msg) {
	var ctl api.Control
	if json.Unmarshal(m.Data, &ctl) != nil || ctl.From != "" || ctl.Reason == "" {
		return // not rank 0's, or launch's own
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reason == "" {
		c.reason = ctl.Reason
		close(c.heard)
	}
}

// reset forgets the reason: a rank was started again and the job goes
// on, so a later stop has a cause of its own.
func (c *firstCause) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reason != "" {
		c.reason, c.heard = "", make(chan struct{})
	}
}

// wait returns the reason, waiting up to limit for it to arrive.
func (c *firstCause) wait(limit time.Duration) string {
	c.mu.Lock()
	heard := c.heard
	c.mu.Unlock()
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-heard:
	case <-t.C:
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reason
}

// exitCode is a process's exit status, or -1 (killed by a signal, or no
// exit at all).
func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err == nil {
		return 0
	}
	return -1
}
