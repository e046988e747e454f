//go:build darwin || dragonfly || freebsd || netbsd || openbsd

package termlog

import "golang.org/x/sys/unix"

func isTerminal(fd uintptr) bool {
	_, err := unix.IoctlGetTermios(int(fd), unix.TIOCGETA) // #nosec G115 -- a descriptor fits an int
	return err == nil
}

func width(fd uintptr) int {
	ws, err := unix.IoctlGetWinsize(int(fd), unix.TIOCGWINSZ) // #nosec G115 -- a descriptor fits an int
	if err != nil {
		return 0
	}
	return int(ws.Col)
}
