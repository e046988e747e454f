package client

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/broadcast/api"
)

// Mux carries the replies of many requests on one subscription, as a
// long-running client (the HTTP gateway) wants: Stream subscribes two
// inboxes and waits for the server's acknowledgement (a round trip) before
// every request; a Mux subscribed once routes each reply by its subject.
// It is safe for concurrent use.
type Mux struct {
	tr     broadcast.Transport
	prefix string
	unsub  func() error

	mu     sync.Mutex
	next   uint64
	routes map[string]func(*broadcast.Msg)
}

// NewMux subscribes to a fresh inbox's subtree on tr and waits until the
// server has the subscription. Close unsubscribes.
func NewMux(ctx context.Context, tr broadcast.Transport) (*Mux, error) {
	m := &Mux{tr: tr, prefix: tr.NewInbox(), routes: map[string]func(*broadcast.Msg){}}
	u, err := tr.Subscribe(m.prefix+".>", m.dispatch)
	if err != nil {
		return nil, fmt.Errorf("reply mux: %w", err)
	}
	m.unsub = u
	if err := tr.Flush(ctx); err != nil {
		_ = u()
		return nil, fmt.Errorf("reply mux: %w", err)
	}
	return m, nil
}

// Close unsubscribes; requests still streaming get no more replies.
func (m *Mux) Close() error { return m.unsub() }

// Stream is client.Stream with the replies routed through m.
func (m *Mux) Stream(ctx context.Context, subj broadcast.Subjects, req *api.GenerateRequest, cb Callbacks) (*api.GenerateReply, error) {
	return resumable(ctx, req, cb, func(r *api.GenerateRequest, cb Callbacks) (*api.GenerateReply, error) {
		return stream1(ctx, m.tr, subj, r, cb, m.attach)
	})
}

// dispatch runs on the transport's delivery goroutine, as a stream's own
// subscription's handler would.
func (m *Mux) dispatch(msg *broadcast.Msg) {
	m.mu.Lock()
	h := m.routes[msg.Subject]
	m.mu.Unlock()
	if h != nil {
		h(msg)
	}
}

// attach gives s two subjects under the mux's prefix, routed to it until
// the returned function is called.
func (m *Mux) attach(_ context.Context, s *stream) (func(), error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.next++
	n := strconv.FormatUint(m.next, 36)
	s.inbox, s.ackInbox = m.prefix+".r"+n, m.prefix+".k"+n
	m.routes[s.inbox], m.routes[s.ackInbox] = s.onReply, s.onAck
	return func() {
		m.mu.Lock()
		delete(m.routes, s.inbox)
		delete(m.routes, s.ackInbox)
		m.mu.Unlock()
	}, nil
}
