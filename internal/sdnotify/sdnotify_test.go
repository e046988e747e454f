package sdnotify

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// listenNotify binds a unixgram socket like systemd's notification socket.
func listenNotify(t *testing.T, name string) *net.UnixConn {
	t.Helper()
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// recv reads one datagram, failing after a generous deadline.
func recv(t *testing.T, conn *net.UnixConn) string {
	t.Helper()
	if err := conn.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	return string(buf[:n])
}

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestNotifyPathSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "notify.sock")
	conn := listenNotify(t, sock)
	n := New(env(map[string]string{"NOTIFY_SOCKET": sock}), os.Getpid(), slog.New(slog.DiscardHandler))
	for _, state := range []string{"READY=1\nSTATUS=rendezvous complete", "STOPPING=1"} {
		if err := n.send(state); err != nil {
			t.Fatal(err)
		}
		if got := recv(t, conn); got != state {
			t.Errorf("received %q, want %q", got, state)
		}
	}
}

func TestNotifyAbstractSocket(t *testing.T) {
	name := fmt.Sprintf("@tpcoord-test-notify-%d-%d", os.Getpid(), time.Now().UnixNano())
	conn := listenNotify(t, name)
	n := New(env(map[string]string{"NOTIFY_SOCKET": name}), os.Getpid(), slog.New(slog.DiscardHandler))
	if err := n.send("READY=1"); err != nil {
		t.Fatal(err)
	}
	if got := recv(t, conn); got != "READY=1" {
		t.Errorf("received %q", got)
	}
	// The abstract name must not have become a file.
	if _, err := os.Stat(name); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stat %s: %v; want no such file", name, err)
	}
}

func TestNotifyUnsetIsNoop(t *testing.T) {
	n := New(env(nil), os.Getpid(), slog.New(slog.DiscardHandler))
	if err := n.send("READY=1"); err != nil {
		t.Fatal(err)
	}
	n.Notify("STOPPING=1")
	n.StartWatchdog()() // starts nothing, stops at once
}

func TestNotifyMissingSocketErrors(t *testing.T) {
	n := New(env(map[string]string{"NOTIFY_SOCKET": filepath.Join(t.TempDir(), "absent.sock")}), os.Getpid(), slog.New(slog.DiscardHandler))
	if err := n.send("READY=1"); err == nil {
		t.Fatal("send to a missing socket succeeded")
	}
	n.Notify("READY=1") // logs, does not panic or block
}

func TestNotifyWatchdogPings(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "notify.sock")
	conn := listenNotify(t, sock)
	n := New(env(map[string]string{
		"NOTIFY_SOCKET": sock, "WATCHDOG_USEC": "20000", "WATCHDOG_PID": fmt.Sprint(os.Getpid()),
	}), os.Getpid(), slog.New(slog.DiscardHandler))
	if n.watchdog != 20*time.Millisecond {
		t.Fatalf("watchdog interval %v, want 20ms", n.watchdog)
	}
	stop := n.StartWatchdog()
	for range 3 {
		if got := recv(t, conn); got != "WATCHDOG=1" {
			t.Fatalf("received %q, want WATCHDOG=1", got)
		}
	}
	stop()
	stop() // idempotent
	// After stop returns no goroutine is left to ping: drain what was
	// already queued, then the socket stays silent.
	if err := conn.SetReadDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	for {
		if _, err := conn.Read(buf); err != nil {
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				t.Fatal(err)
			}
			break
		}
	}
}

func TestNotifyWatchdogEnv(t *testing.T) {
	pid := os.Getpid()
	for _, tc := range []struct {
		env  map[string]string
		want time.Duration
	}{
		{map[string]string{"NOTIFY_SOCKET": "/run/x", "WATCHDOG_USEC": "30000000"}, 30 * time.Second},
		{map[string]string{"NOTIFY_SOCKET": "/run/x", "WATCHDOG_USEC": "30000000", "WATCHDOG_PID": fmt.Sprint(pid)}, 30 * time.Second},
		{map[string]string{"NOTIFY_SOCKET": "/run/x", "WATCHDOG_USEC": "30000000", "WATCHDOG_PID": fmt.Sprint(pid + 1)}, 0}, // meant for another process
		{map[string]string{"NOTIFY_SOCKET": "/run/x", "WATCHDOG_USEC": "0"}, 0},
		{map[string]string{"NOTIFY_SOCKET": "/run/x", "WATCHDOG_USEC": "junk"}, 0},
		{map[string]string{"NOTIFY_SOCKET": "/run/x"}, 0},
	} {
		n := New(env(tc.env), pid, slog.New(slog.DiscardHandler))
		if n.watchdog != tc.want {
			keys := make([]string, 0, len(tc.env))
			for k, v := range tc.env {
				keys = append(keys, k+"="+v)
			}
			t.Errorf("%s: watchdog %v, want %v", strings.Join(keys, " "), n.watchdog, tc.want)
		}
	}
}
