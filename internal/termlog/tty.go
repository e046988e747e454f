package termlog

import (
	"io"
	"os"
)

// IsTerminal reports whether w is a terminal: an *os.File whose
// descriptor is one. It is false for anything else (a pipe, a file, a
// socket such as the systemd journal's, a buffer) and where this platform
// cannot tell.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok || f == nil {
		return false
	}
	// SyscallConn, not Fd: Fd would put the descriptor in blocking mode.
	rc, err := f.SyscallConn()
	if err != nil {
		return false
	}
	tty := false
	if err := rc.Control(func(fd uintptr) { tty = isTerminal(fd) }); err != nil {
		return false
	}
	return tty
}

// Width is the number of columns of the terminal w is (see IsTerminal);
// 0 if w is not a terminal or its size is unknown.
func Width(w io.Writer) int {
	f, ok := w.(*os.File)
	if !ok || f == nil {
		return 0
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return 0
	}
	cols := 0
	if err := rc.Control(func(fd uintptr) { cols = width(fd) }); err != nil {
		return 0
	}
	return cols
}
