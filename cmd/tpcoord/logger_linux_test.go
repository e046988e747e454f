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

// TestNewLoggerFormats (NO_COLOR set): auto is termlog's text on a
// terminal and JSON on a pipe; text is termlog's on a terminal and slog's (full date and time) on
// a pipe; json is JSON on both.
func TestNewLoggerFormats(t *testing.T) {
	t.Setenv("NO_COLOR", "1")
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

// TestNewLoggerColor: on a terminal, levels are coloured unless NO_COLOR
// is set (to anything but ""); text on a pipe never is.
func TestNewLoggerColor(t *testing.T) {
	for _, c := range []struct {
		noColor string
		tty     bool
		want    string
	}{
		{"", true, "\x1b[33mWARN\x1b[0m  careful"},
		{"1", true, " WARN  careful"},
		{"", false, "level=WARN msg=careful"},
	} {
		t.Setenv("NO_COLOR", c.noColor)
		w, r := pipe(t)
		if c.tty {
			w, r = pty(t)
		}
		log, err := newLogger(w, "info", "text")
		if err != nil {
			t.Fatal(err)
		}
		log.Warn("careful")
		line, err := bufio.NewReader(r).ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(line, c.want) || c.noColor != "" && strings.Contains(line, "\x1b") || !c.tty && strings.Contains(line, "\x1b") {
			t.Errorf("NO_COLOR=%q, terminal %v: line %q, want it to hold %q", c.noColor, c.tty, line, c.want)
		}
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

// TestHelpWidthTerminal: without COLUMNS, help on a terminal wraps at the
// terminal's width.
func TestHelpWidthTerminal(t *testing.T) {
	w, ptmx := pty(t)
	rc, err := ptmx.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var ierr error
	if err := rc.Control(func(fd uintptr) {
		ierr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: 40, Col: 97})
	}); err != nil || ierr != nil {
		t.Fatalf("set the window size: %v %v", err, ierr)
	}
	if got := helpWidth(w, func(string) string { return "" }); got != 97 {
		t.Fatalf("width %d on a 97-column terminal", got)
	}
}
