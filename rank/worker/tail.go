package worker

import (
	"bytes"
	"io"
	"strconv"
	"sync"
	"unicode/utf8"
)

// tailSize bounds what outputTail keeps; lastLineMax bounds the line it
// reports.
const (
	tailSize    = 4096
	lastLineMax = 300
)

// outputTail passes a process's output on and keeps its end, so that an
// error about the process (it exited, it closed the connection) can say
// what it last wrote: a Python traceback's last line, or its error log.
type outputTail struct {
	mu  sync.Mutex
	w   io.Writer // nil: the output is not passed on
	buf []byte
}

// Write passes p on and keeps it; it never fails (an error of the writer
// behind it must not stop the process).
func (t *outputTail) Write(p []byte) (int, error) {
	if t.w != nil {
		_, _ = t.w.Write(p)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - tailSize; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

// lastLine is the last line of the output that is not blank, trimmed
// (and shortened to lastLineMax bytes); "" if none.
func (t *outputTail) lastLine() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := bytes.Split(bytes.ReplaceAll(t.buf, []byte("\r"), []byte("\n")), []byte("\n"))
	for i := len(lines) - 1; i >= 0; i-- {
		l := bytes.TrimSpace(lines[i])
		if len(l) == 0 {
			continue
		}
		if len(l) > lastLineMax {
			l = l[:lastLineMax]
			for !utf8.Valid(l) {
				l = l[:len(l)-1]
			}
			l = append(l, "..."...)
		}
		return string(l)
	}
	return ""
}

// said is what to add to an error about the process: its last line, or
// nothing.
func (t *outputTail) said() string {
	if t == nil {
		return ""
	}
	if l := t.lastLine(); l != "" {
		return "; its last line: " + strconv.Quote(l)
	}
	return ""
}
