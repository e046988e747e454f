package fanout

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/tpcoord/tpcoord/cmd/tpcoord/internal/bench/job"
	"github.com/tpcoord/tpcoord/internal/rankproc"
)

// proc is one spawned process of a case. Its owner goroutine hands every
// line of its stdout to lines (the first line, then one JSON report) and
// closes done once the process has exited.
type proc struct {
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser // the publisher's and the server's; nil for followers
	lines  chan string
	done   chan struct{}
	err    error // valid once done is closed
	stderr bytes.Buffer
}

// procs owns the processes of one case.
type procs struct {
	procs []*proc
	wg    sync.WaitGroup
}

// start starts self with args and env as name; withStdin gives it a stdin
// the case writes to and closes.
func (ps *procs) start(self, name string, args, env []string, withStdin bool) (*proc, error) {
	p := &proc{name: name, lines: make(chan string, 2), done: make(chan struct{})}
	p.cmd = job.Command(self, args, env)
	p.cmd.SysProcAttr = rankproc.DieWithParent()
	p.cmd.Stderr = &p.stderr
	out, err := p.cmd.StdoutPipe()
	if err == nil && withStdin {
		p.stdin, err = p.cmd.StdinPipe()
	}
	if err == nil {
		err = p.cmd.Start()
	}
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	ps.procs = append(ps.procs, p)
	ps.wg.Go(func() {
		br := bufio.NewReader(out)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				break
			}
			select {
			case p.lines <- strings.TrimSuffix(line, "\n"):
			default: // more lines than the protocol has: ignored
			}
		}
		p.err = p.cmd.Wait() // stdout is drained: Wait may run now
		close(p.done)
	})
	return p, nil
}

// line waits for p's next stdout line until deadline.
func (p *proc) line(ctx context.Context, deadline time.Time, what string) (string, error) {
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case l := <-p.lines:
		return l, nil
	case <-p.done:
		select {
		case l := <-p.lines:
			return l, nil
		default:
		}
		if p.err == nil {
			return "", fmt.Errorf("%s exited (status 0) before %s: %s", p.name, what, job.Tail(p.stderr.String(), 500))
		}
		return "", fmt.Errorf("%s exited before %s: %w %s", p.name, what, p.err, job.Tail(p.stderr.String(), 500))
	case <-ctx.Done():
		return "", ctx.Err()
	case <-timer.C:
		return "", fmt.Errorf("%s: no %s by the deadline", p.name, what)
	}
}

// firstLine waits for p's first line, which must start with prefix, and
// returns the rest.
func (p *proc) firstLine(ctx context.Context, deadline time.Time, what, prefix string) (string, error) {
	l, err := p.line(ctx, deadline, what)
	if err != nil {
		return "", err
	}
	rest, ok := strings.CutPrefix(l, prefix)
	if !ok {
		return "", fmt.Errorf("%s: unexpected first line %q", p.name, l)
	}
	return rest, nil
}

// report waits for p's JSON report line until deadline and decodes it
// into v.
func (p *proc) report(ctx context.Context, deadline time.Time, v any) error {
	l, err := p.line(ctx, deadline, "its report")
	if err != nil {
		return err
	}
	if err := json.Unmarshal([]byte(l), v); err != nil {
		return fmt.Errorf("%s: report: %w", p.name, err)
	}
	return nil
}

// closeStdins ends the stdin of every process that has one: the publisher
// and the server exit once it ends.
func (ps *procs) closeStdins() {
	for _, p := range ps.procs {
		if p.stdin != nil {
			p.stdin.Close()
		}
	}
}

// waitExited waits for every process to exit, each within timeout, and
// returns the first failure.
func (ps *procs) waitExited(timeout time.Duration) error {
	for _, p := range ps.procs {
		timer := time.NewTimer(timeout)
		select {
		case <-p.done:
			timer.Stop()
		case <-timer.C:
			return fmt.Errorf("%s did not exit within %v of the end", p.name, timeout)
		}
		if p.err != nil {
			return fmt.Errorf("%s: %w %s", p.name, p.err, job.Tail(p.stderr.String(), 500))
		}
	}
	return nil
}

// stop kills every process still running and waits for their owners.
// Safe on every path.
func (ps *procs) stop() {
	ps.closeStdins()
	for _, p := range ps.procs {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
		}
	}
	ps.wg.Wait()
}
