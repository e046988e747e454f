// Package sdnotify speaks systemd's service notification protocol, so that
// a unit of Type=notify knows when an agent is ready and a watchdog knows it
// is alive.
package sdnotify

import (
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"
)

// Notifier speaks systemd's service notification protocol (sd_notify(3)):
// one datagram of newline-separated KEY=VALUE assignments to the unix socket
// named by $NOTIFY_SOCKET. The tpcoord@.service unit is Type=notify, so
// systemd considers a rank started only once it sends READY=1, which the
// agent does when rendezvous completes. With NOTIFY_SOCKET unset (not under
// systemd, or a unit of another type) every method is a no-op.
//
// The protocol is a few lines, so it is implemented here rather than pulled
// in with cgo (libsystemd) or a new dependency.
type Notifier struct {
	socket   string        // $NOTIFY_SOCKET; "" disables notifications
	watchdog time.Duration // $WATCHDOG_USEC; 0 disables the watchdog
	log      *slog.Logger
}

// New reads the protocol's variables through getenv (os.Getenv in
// the agent, a map in tests). pid is this process's ID: systemd sets
// WATCHDOG_PID to the main process, so a child that inherited the variables
// must not ping on its behalf.
func New(getenv func(string) string, pid int, log *slog.Logger) *Notifier {
	n := &Notifier{socket: getenv("NOTIFY_SOCKET"), log: log}
	if p := getenv("WATCHDOG_PID"); p != "" && p != strconv.Itoa(pid) {
		return n
	}
	if usec, err := strconv.ParseUint(getenv("WATCHDOG_USEC"), 10, 63); err == nil && usec > 0 {
		n.watchdog = time.Duration(usec) * time.Microsecond
	}
	return n
}

// Notify sends state, e.g. "READY=1\nSTATUS=decoding". Errors are logged,
// not returned: a lost notification must not stop a rank (systemd then
// times the start out or fires the watchdog, which is the right outcome).
func (n *Notifier) Notify(state string) {
	if err := n.send(state); err != nil {
		n.log.Warn("sd_notify failed", "socket", n.socket, "state", state, "err", err)
	}
}

func (n *Notifier) send(state string) error {
	if n.socket == "" {
		return nil
	}
	// A leading "@" names a socket in Linux's abstract namespace; Go's
	// sockaddr conversion turns it into the leading NUL byte the kernel
	// expects, as sd_notify does.
	addr := &net.UnixAddr{Name: n.socket, Net: "unixgram"}
	conn, err := net.DialUnix("unixgram", nil, addr)
	if err != nil {
		return fmt.Errorf("sd_notify: %w", err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(state)); err != nil {
		return fmt.Errorf("sd_notify: %w", err)
	}
	return nil
}

// StartWatchdog pings systemd's watchdog (WATCHDOG=1) every half
// WatchdogSec, as sd_watchdog_enabled(3) advises, until the returned stop
// function is called; stop waits for the goroutine to exit and is
// idempotent. Without WATCHDOG_USEC it starts nothing.
func (n *Notifier) StartWatchdog() (stop func()) {
	if n.socket == "" || n.watchdog <= 0 {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(n.watchdog / 2)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				n.Notify("WATCHDOG=1")
			}
		}
	})
	var once sync.Once
	return func() {
		once.Do(func() { close(done) })
		wg.Wait()
	}
}
