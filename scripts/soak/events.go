package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// event is one line of events.jsonl: a process start or exit, a fault, a
// phase of the soak.
type event struct {
	T      time.Time `json:"t"`
	Kind   string    `json:"kind"`
	Proc   string    `json:"proc,omitempty"`
	Inc    int       `json:"inc,omitempty"`
	PID    int       `json:"pid,omitempty"`
	Exit   *exitInfo `json:"exit,omitempty"`
	Detail string    `json:"detail,omitempty"`
}

func (e *event) String() string {
	s := e.Kind
	switch {
	case e.Proc != "" && e.Inc > 0:
		s += fmt.Sprintf(" %s#%d", e.Proc, e.Inc)
	case e.Proc != "":
		s += " " + e.Proc
	}
	if e.PID != 0 {
		s += fmt.Sprintf(" pid %d", e.PID)
	}
	if e.Exit != nil {
		s += fmt.Sprintf(" exit code %d signal %q expected %v", e.Exit.Code, e.Exit.Signal, e.Exit.Expected)
		if e.Exit.LastErr != "" {
			s += ": " + e.Exit.LastErr
		}
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// eventLog keeps the events, writes them to a JSON-lines file and echoes
// them, timestamped, to the console.
type eventLog struct {
	out  *jsonl
	echo io.Writer

	mu  sync.Mutex
	all []event
}

func newEventLog(path string, echo io.Writer) (*eventLog, error) {
	out, err := newJSONL(path)
	if err != nil {
		return nil, err
	}
	return &eventLog{out: out, echo: echo}, nil
}

func (l *eventLog) add(e event) {
	if e.T.IsZero() {
		e.T = time.Now()
	}
	l.mu.Lock()
	l.all = append(l.all, e)
	l.mu.Unlock()
	l.out.write(&e)
	fmt.Fprintf(l.echo, "%s %s\n", e.T.Format("15:04:05.000"), e.String())
}

// note records a phase of the soak.
func (l *eventLog) note(format string, args ...any) {
	l.add(event{Kind: "note", Detail: fmt.Sprintf(format, args...)})
}

func (l *eventLog) events() []event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]event(nil), l.all...)
}

// jsonl is a JSON-lines file written by several goroutines.
type jsonl struct {
	mu  sync.Mutex
	f   *os.File
	enc *json.Encoder
	err error
}

func newJSONL(path string) (*jsonl, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	return &jsonl{f: f, enc: json.NewEncoder(f)}, nil
}

// write appends v; the first error is kept for close.
func (j *jsonl) write(v any) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := j.enc.Encode(v); err != nil && j.err == nil {
		j.err = err
	}
}

func (j *jsonl) close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := j.f.Close(); err != nil && j.err == nil {
		j.err = err
	}
	return j.err
}
