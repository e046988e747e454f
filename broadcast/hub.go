package broadcast

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
)

// Hub is an in-memory message bus for tests of the logic above the
// transport. Each Connect returns a Transport; a message published on one
// is delivered synchronously, in publish order, to every matching
// subscription of every connection. A request (a message with a reply
// subject) that no subscription matches gets the "no responders" status
// message on its reply subject, delivered as a NATS server does: to the
// requesting connection's own subscriptions only. It is not a model of
// NATS's delivery guarantees: tests of those use the real server.
type Hub struct {
	mu         sync.Mutex
	maxPayload int // > 0: Publish refuses larger messages, as a NATS server does
	subs       map[int]*hubSub
	next       int
	inbox      int
}

type hubSub struct {
	conn    *hubConn
	pattern string
	fn      func(*Msg)
}

// NewHub returns an empty hub.
func NewHub() *Hub { return &Hub{subs: map[int]*hubSub{}} }

// LimitPayload makes Publish refuse, with a *TooLargeError, a message whose
// data is larger than limit bytes, as a NATS server refuses one above its
// max_payload (0: no limit, the default).
func (h *Hub) LimitPayload(limit int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.maxPayload = limit
}

// Connect returns a new connection to the hub.
func (h *Hub) Connect() Transport { return &hubConn{hub: h} }

type hubConn struct {
	hub    *Hub
	mu     sync.Mutex
	closed bool
}

var _ Transport = (*hubConn)(nil)

func (c *hubConn) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

func (c *hubConn) Publish(m *Msg) error {
	if c.isClosed() {
		return ErrClosed
	}
	h := c.hub
	h.mu.Lock()
	if h.maxPayload > 0 && len(m.Data) > h.maxPayload {
		h.mu.Unlock()
		return &TooLargeError{Size: len(m.Data), Max: h.maxPayload}
	}
	var fns []func(*Msg)
	for _, s := range h.subs {
		if !s.conn.isClosed() && SubjectMatch(s.pattern, m.Subject) {
			fns = append(fns, s.fn)
		}
	}
	if len(fns) == 0 && m.Reply != "" {
		for _, s := range h.subs {
			if s.conn == c && SubjectMatch(s.pattern, m.Reply) {
				fns = append(fns, s.fn)
			}
		}
		h.mu.Unlock()
		for _, fn := range fns {
			fn(&Msg{Subject: m.Reply, Header: map[string]string{"Status": "503"}})
		}
		return nil
	}
	h.mu.Unlock()
	for _, fn := range fns {
		// Each subscriber gets its own copy, as from NATS.
		cp := *m
		cp.Data = append([]byte(nil), m.Data...)
		cp.Header = maps.Clone(m.Header)
		fn(&cp)
	}
	return nil
}

func (c *hubConn) Subscribe(subject string, fn func(*Msg)) (func() error, error) {
	if c.isClosed() {
		return nil, ErrClosed
	}
	h := c.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	id := h.next
	h.next++
	h.subs[id] = &hubSub{conn: c, pattern: subject, fn: fn}
	return func() error {
		h.mu.Lock()
		defer h.mu.Unlock()
		delete(h.subs, id)
		return nil
	}, nil
}

func (c *hubConn) NewInbox() string {
	h := c.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	h.inbox++
	return fmt.Sprintf("_INBOX.hub.%d", h.inbox)
}

func (c *hubConn) Flush(context.Context) error {
	if c.isClosed() {
		return ErrClosed
	}
	return nil
}

func (c *hubConn) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
}

// SubjectMatch reports whether subject matches pattern under NATS rules:
// "*" matches one token, a trailing ">" matches one or more.
func SubjectMatch(pattern, subject string) bool {
	pt, st := strings.Split(pattern, "."), strings.Split(subject, ".")
	for i, p := range pt {
		if p == ">" {
			return i == len(pt)-1 && len(st) > i
		}
		if i >= len(st) || (p != "*" && p != st[i]) {
			return false
		}
	}
	return len(pt) == len(st)
}
