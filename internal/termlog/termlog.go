// Package termlog writes log records for a person at a terminal, one line
// each: "15:04:05.000 INFO  message key=value ...". The time of day is
// enough there (the person is watching now), the level and the message
// lead, and the attributes follow as slog's TextHandler writes them, so
// values are quoted and escaped the same way. With colour (WithColor), the
// time is dimmed and the level coloured by severity. IsTerminal tells
// whether a writer is a terminal, Width how wide it is.
package termlog

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"time"
	"unicode"
)

// TimeFormat is the time of day a line starts with.
const TimeFormat = "15:04:05.000"

// Handler is a slog.Handler writing terminal lines to one writer.
type Handler struct {
	mu    *sync.Mutex // shared by the handlers derived from one: one line at a time
	w     io.Writer
	level slog.Leveler
	color bool // ANSI colours: the time dimmed, the level by severity
	// chain replays WithAttrs and WithGroup, in order, on the TextHandler
	// that formats a record's attributes.
	chain []func(slog.Handler) slog.Handler
}

// NewHandler returns a handler writing records at level or above to w
// (nil level: info).
func NewHandler(w io.Writer, level slog.Leveler) *Handler {
	if level == nil {
		level = slog.LevelInfo
	}
	return &Handler{mu: &sync.Mutex{}, w: w, level: level}
}

// WithColor returns a handler like h that writes the time dimmed and the
// level in its colour (ANSI escape sequences): for a terminal, unless the
// user asked for none (NO_COLOR).
func (h *Handler) WithColor() *Handler {
	c := *h
	c.color = true
	return &c
}

// ANSI escape sequences of the colours.
const (
	ansiReset = "\x1b[0m"
	ansiDim   = "\x1b[2m"
)

// levelColor is the colour a level is written in: debug blue, info green,
// warn yellow, error (and above) bold red.
func levelColor(l slog.Level) string {
	switch {
	case l < slog.LevelInfo:
		return "\x1b[34m"
	case l < slog.LevelWarn:
		return "\x1b[32m"
	case l < slog.LevelError:
		return "\x1b[33m"
	}
	return "\x1b[1;31m"
}

// Enabled reports whether records at l are written.
func (h *Handler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level.Level() }

// Handle writes r as one line, in a single Write.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	var b bytes.Buffer
	if !r.Time.IsZero() {
		h.paint(&b, ansiDim, r.Time.Format(TimeFormat))
		b.WriteByte(' ')
	}
	lv := r.Level.String()
	h.paint(&b, levelColor(r.Level), lv)
	for range 5 - len(lv) { // the levels' columns line up
		b.WriteByte(' ')
	}
	b.WriteByte(' ')
	b.WriteString(message(r.Message))
	attrs, err := h.attrs(ctx, r)
	if err != nil {
		return err
	}
	if len(attrs) > 0 {
		b.WriteByte(' ')
		b.Write(attrs)
	}
	b.WriteByte('\n')
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err = h.w.Write(b.Bytes())
	return err
}

// paint writes s, in color if h writes colours.
func (h *Handler) paint(b *bytes.Buffer, color, s string) {
	if !h.color {
		b.WriteString(s)
		return
	}
	b.WriteString(color)
	b.WriteString(s)
	b.WriteString(ansiReset)
}

// attrs formats r's attributes, and those the chain adds, with a
// TextHandler that leaves out the time, level and message.
func (h *Handler) attrs(ctx context.Context, r slog.Record) ([]byte, error) {
	var b bytes.Buffer
	var t slog.Handler = slog.NewTextHandler(&b, &slog.HandlerOptions{Level: slog.Level(math.MinInt), ReplaceAttr: dropBuiltins})
	for _, f := range h.chain {
		t = f(t)
	}
	ar := slog.NewRecord(time.Time{}, r.Level, "", r.PC) // a zero time is not written
	r.Attrs(func(a slog.Attr) bool {
		ar.AddAttrs(a)
		return true
	})
	if err := t.Handle(ctx, ar); err != nil {
		return nil, err
	}
	return bytes.TrimSpace(b.Bytes()), nil
}

// dropBuiltins removes the level and the (empty) message the attribute
// TextHandler would write; Handle writes them itself.
func dropBuiltins(groups []string, a slog.Attr) slog.Attr {
	if len(groups) > 0 {
		return a
	}
	if _, isLevel := a.Value.Any().(slog.Level); a.Key == slog.LevelKey && isLevel || a.Key == slog.MessageKey && a.Value.String() == "" {
		return slog.Attr{}
	}
	return a
}

// message is the message as written: as it is, or quoted if it holds a
// line break or another character that would garble the line.
func message(m string) string {
	for _, c := range m {
		if !unicode.IsPrint(c) {
			return strconv.Quote(m)
		}
	}
	return m
}

// WithAttrs returns a handler adding attrs to every record.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	if len(attrs) == 0 {
		return h
	}
	return h.with(func(t slog.Handler) slog.Handler { return t.WithAttrs(attrs) })
}

// WithGroup returns a handler putting later attributes in group name.
func (h *Handler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	return h.with(func(t slog.Handler) slog.Handler { return t.WithGroup(name) })
}

func (h *Handler) with(f func(slog.Handler) slog.Handler) *Handler {
	c := *h
	c.chain = append(append([]func(slog.Handler) slog.Handler(nil), h.chain...), f)
	return &c
}
