package natsbus

import (
	"errors"
	"fmt"
	"regexp"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/tpcoord/tpcoord/broadcast"
)

// refusals hands the server's refusals of publishes (permissions
// violations, which NATS reports asynchronously, on no request) to those
// watching the subject: a client waiting for the answer to a request the
// server never delivered ends its wait at once instead of at its timeout.
type refusals struct {
	mu      sync.Mutex
	next    int
	watches map[int]refusalWatch
}

type refusalWatch struct {
	subject string
	ch      chan error
}

var _ broadcast.RefusalWatcher = (*Conn)(nil)

// publishRefused is the subject of a permissions violation's "Publish to"
// (nats-server: Permissions Violation for Publish to "SUBJECT").
var publishRefused = regexp.MustCompile(`Publish to "([^"]+)"`)

// WatchRefusals implements broadcast.RefusalWatcher.
func (c *Conn) WatchRefusals(subject string) (<-chan error, func()) {
	r := &c.refusals
	ch := make(chan error, 1)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.watches == nil {
		r.watches = map[int]refusalWatch{}
	}
	id := r.next
	r.next++
	r.watches[id] = refusalWatch{subject: subject, ch: ch}
	return ch, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		delete(r.watches, id)
	}
}

// observe takes an asynchronous error of the connection: a refused
// publish goes to the subject's watchers. It reports whether a watcher
// took err.
func (r *refusals) observe(err error) bool {
	if !errors.Is(err, nats.ErrPermissionViolation) {
		return false
	}
	m := publishRefused.FindStringSubmatch(err.Error())
	if m == nil {
		return false
	}
	taken := false
	refused := fmt.Errorf("publish to %s: %w: this NATS user may not publish there (%w)", m[1], broadcast.ErrRefused, err)
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, w := range r.watches {
		if w.subject == m[1] {
			taken = true
			select {
			case w.ch <- refused:
			default:
			}
		}
	}
	return taken
}
