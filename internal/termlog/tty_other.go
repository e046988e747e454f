//go:build !(linux || darwin || dragonfly || freebsd || netbsd || openbsd)

package termlog

// isTerminal: this platform's terminals are not recognised; logs are JSON
// unless text is asked for.
func isTerminal(uintptr) bool { return false }

// width: this platform's terminal sizes are not read; help wraps at 80.
func width(uintptr) int { return 0 }
