package main

import (
	"bufio"
	"encoding/json"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestNewLoggerFormats: auto is termlog's text on a terminal and JSON on a
// pipe; text is termlog's on a terminal and slog's (full date and time) on
// a pipe; json is JSON on both.
func TestNewLoggerFormats(t *testing.T) {
	termLine := regexp.MustCompile(`^\d\d:\d\d:\d\d\.\d{3} INFO  hello k=v\r?$`)
	slogText := regexp.MustCompile(`^time=\d{4}-\d\d-\d\dT\S+ level=INFO msg=hello k=v$`)
	isJSON := func(line string) bool {
		var m map[string]any
		return json.Unmarshal([]byte(line), &m) == nil && m["msg"] == "hello" && m["k"] == "v"
	}
	for _, c := range []struct {
		format string
		tty    bool
		ok     func(string) bool
	}{
		{"auto", true, termLine.MatchString},
		{"auto", false, isJSON},
		{"text", true, termLine.MatchString},
		{"text", false, slogText.MatchString},
		{"json", true, isJSON},
		{"json", false, isJSON},
	} {
		w, r := pipe(t)
		if c.tty {
			w, r = pty(t)
		}
		log, err := newLogger(w, "info", c.format)
		if err != nil {
			t.Fatal(err)
		}
		log.Debug("below the level")
		log.Info("hello", "k", "v")
		line, err := bufio.NewReader(r).ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if line = strings.TrimRight(line, "\r\n"); !c.ok(line) {
			t.Errorf("--log-format %s, terminal %v: line %q", c.format, c.tty, line)
		}
	}
	if _, err := newLogger(os.Stderr, "info", "xml"); err == nil || !strings.Contains(err.Error(), `log-format: "xml" is not one of auto, text, json`) {
		t.Errorf("--log-format xml: %v", err)
	}
}

func pipe(t *testing.T) (w, r *os.File) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); w.Close() })
	return w, r
}

// pty opens a pseudo-terminal: w is its terminal end, r reads what is
// written there.
func pty(t *testing.T) (w, r *os.File) {
	t.Helper()
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { ptmx.Close() })
	rc, err := ptmx.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	var ierr error
	if err := rc.Control(func(fd uintptr) {
		if ierr = unix.IoctlSetPointerInt(int(fd), unix.TIOCSPTLCK, 0); ierr == nil {
			n, ierr = unix.IoctlGetInt(int(fd), unix.TIOCGPTN)
		}
	}); err != nil || ierr != nil {
		t.Fatalf("unlock the pseudo-terminal: %v %v", err, ierr)
	}
	pts, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pts.Close() })
	return pts, ptmx
}
