package termlog

import (
	"os"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// TestIsTerminalPTY: the follower end of a new pseudo-terminal is a
// terminal.
func TestIsTerminalPTY(t *testing.T) {
	_, pts := newPTY(t)
	if !IsTerminal(pts) {
		t.Fatalf("%s: IsTerminal = false", pts.Name())
	}
}

// TestWidthPTY: Width is the column count the terminal was given; 0 for
// a pipe.
func TestWidthPTY(t *testing.T) {
	ptmx, pts := newPTY(t)
	for _, cols := range []uint16{57, 132} {
		if err := ctl(ptmx, func(fd int) error {
			return unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, &unix.Winsize{Row: 24, Col: cols})
		}); err != nil {
			t.Fatal(err)
		}
		if got := Width(pts); got != int(cols) {
			t.Errorf("Width = %d, want %d", got, cols)
		}
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if got := Width(w); got != 0 {
		t.Errorf("Width(pipe) = %d, want 0", got)
	}
}

// newPTY opens a new pseudo-terminal: its leader and follower ends.
func newPTY(t *testing.T) (ptmx, pts *os.File) {
	t.Helper()
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { ptmx.Close() })
	var n int
	if err := ctl(ptmx, func(fd int) error {
		if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
			return err
		}
		n, err = unix.IoctlGetInt(fd, unix.TIOCGPTN)
		return err
	}); err != nil {
		t.Fatalf("unlock the pseudo-terminal: %v", err)
	}
	pts, err = os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pts.Close() })
	return ptmx, pts
}

func ctl(f *os.File, fn func(fd int) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil {
		return err
	}
	return ferr
}
