package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is one supervised process (a rank or the NATS server): its
// command, its current incarnation and its log file, which every
// incarnation appends to. An incarnation that exits without the soak
// having stopped or killed it is restarted after restartDelay, as
// systemd's Restart= would, and the exit is recorded.
type proc struct {
	name    string
	path    string
	args    []string
	env     []string
	logPath string
	ev      *eventLog
	// restartDelay < 0: never restart by itself.
	restartDelay time.Duration

	mu       sync.Mutex
	inc      int
	cmd      *exec.Cmd
	exited   chan struct{} // closed when the current incarnation is reaped
	expected bool          // the soak stopped or killed the current incarnation
	closed   bool          // no more starts: the soak is stopping
	quit     chan struct{} // closed with closed
	wg       sync.WaitGroup
}

func newProc(name, path string, args, env []string, logPath string, ev *eventLog, restartDelay time.Duration) *proc {
	return &proc{name: name, path: path, args: args, env: env, logPath: logPath, ev: ev, restartDelay: restartDelay, quit: make(chan struct{})}
}

// exitInfo is how an incarnation ended.
type exitInfo struct {
	Code     int    `json:"code"` // -1: killed by a signal
	Signal   string `json:"signal,omitempty"`
	Expected bool   `json:"expected"`
	LastErr  string `json:"last_error,omitempty"` // the last error line of its log
}

// start starts a new incarnation; it fails once the proc is closed.
func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return fmt.Errorf("%s: not started: the soak is stopping", p.name)
	}
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	p.inc++
	fmt.Fprintf(logf, "=== soak: %s incarnation %d starting at %s\n", p.name, p.inc, time.Now().UTC().Format(time.RFC3339Nano))
	cmd := exec.Command(p.path, p.args...)
	cmd.Env = p.env
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group, so a Ctrl-C at the terminal reaches the soak
	// only, which then stops everything in order; the kernel sends SIGKILL
	// if the soak itself dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	p.cmd, p.exited, p.expected = cmd, make(chan struct{}), false
	p.ev.add(event{Kind: "start", Proc: p.name, Inc: p.inc, PID: cmd.Process.Pid})
	p.wg.Add(1)
	go p.reap(cmd, p.inc, p.exited)
	return nil
}

// reap waits for one incarnation, records its exit and restarts the proc
// if nobody expected the exit.
func (p *proc) reap(cmd *exec.Cmd, inc int, exited chan struct{}) {
	defer p.wg.Done()
	err := cmd.Wait()
	p.mu.Lock()
	info := exitOf(cmd.ProcessState, err, p.expected)
	restart := !p.expected && !p.closed && p.restartDelay >= 0
	close(exited)
	p.mu.Unlock()
	if !info.Expected {
		info.LastErr = lastErrorLine(p.logPath)
	}
	p.ev.add(event{Kind: "exit", Proc: p.name, Inc: inc, PID: cmd.Process.Pid, Exit: &info})
	if !restart {
		return
	}
	select {
	case <-time.After(p.restartDelay):
	case <-p.quit:
		return
	}
	if err := p.start(); err != nil {
		p.ev.add(event{Kind: "restart-failed", Proc: p.name, Detail: err.Error()})
		return
	}
	p.ev.add(event{Kind: "restarted", Proc: p.name, Inc: p.incarnation(), Detail: "after an exit the soak did not cause"})
}

func exitOf(st *os.ProcessState, err error, expected bool) exitInfo {
	info := exitInfo{Code: -1, Expected: expected}
	if st == nil {
		info.Signal = err.Error()
		return info
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		info.Signal = ws.Signal().String()
		return info
	}
	info.Code = st.ExitCode()
	return info
}

// lastErrorLine is what the log's last incarnation said when it failed:
// the command's own final error line ("tpcoord: ..."), else its last line
// at level ERROR.
func lastErrorLine(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	const tail = 64 << 10
	if st, err := f.Stat(); err == nil && st.Size() > tail {
		_, _ = f.Seek(st.Size()-tail, 0)
	}
	buf := make([]byte, tail)
	n, _ := f.Read(buf)
	return failureLine(strings.Split(string(buf[:n]), "\n"))
}

// failureLine picks the failure from an incarnation's last log lines.
func failureLine(lines []string) string {
	lastErr := ""
	for i := len(lines) - 1; i >= 0; i-- {
		l := lines[i]
		switch {
		case strings.HasPrefix(l, "=== soak:"):
			return lastErr // the start of this incarnation
		case strings.HasPrefix(l, "tpcoord: "):
			return l
		case lastErr == "" && (strings.Contains(l, `"level":"ERROR"`) || strings.Contains(l, "level=ERROR")):
			lastErr = l
		}
	}
	return lastErr
}

// pid is the current incarnation's pid, 0 if it has exited.
func (p *proc) pid() (pid, inc int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || isClosed(p.exited) {
		return 0, p.inc
	}
	return p.cmd.Process.Pid, p.inc
}

func (p *proc) incarnation() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.inc
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// signal sends sig to the current incarnation; expected marks its exit as
// the soak's doing (no restart, not counted as a failure).
func (p *proc) signal(sig syscall.Signal, expected bool) (pid int, exited <-chan struct{}, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || isClosed(p.exited) {
		return 0, nil, fmt.Errorf("%s is not running", p.name)
	}
	if expected {
		p.expected = true
	}
	return p.cmd.Process.Pid, p.exited, p.cmd.Process.Signal(sig)
}

// kill SIGKILLs the current incarnation and waits until it is reaped.
func (p *proc) kill() (pid int, err error) {
	pid, exited, err := p.signal(syscall.SIGKILL, true)
	if err != nil {
		return 0, err
	}
	<-exited
	return pid, nil
}

// stop ends the proc for good: no more restarts; SIGCONT (it may be
// stopped) and SIGTERM, SIGKILL after grace; it waits for its goroutines.
func (p *proc) stop(grace time.Duration) {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.quit)
	}
	p.mu.Unlock()
	if _, exited, err := p.signal(syscall.SIGTERM, true); err == nil {
		_, _, _ = p.signal(syscall.SIGCONT, true)
		select {
		case <-exited:
		case <-time.After(grace):
			p.ev.add(event{Kind: "stop-timeout", Proc: p.name, Detail: fmt.Sprintf("still running %v after SIGTERM; SIGKILL", grace)})
			_, _ = p.kill()
		}
	}
	p.wg.Wait()
}
