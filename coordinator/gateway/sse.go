package gateway

import (
	"encoding/json"
	"net/http"
	"sync"
	"time"
)

// StreamStallTimeout bounds how long a stream's client may take no bytes
// at all: a write that waits longer fails, the stream is dropped and its
// requests are cancelled at rank 0.
const StreamStallTimeout = 30 * time.Second

// sseWriter writes server-sent events. Headers go out with the first
// event, so a request refused before any token (an overloaded job, say)
// still gets its HTTP status. Callers of send, done and started serialise
// their calls.
//
// The writes happen on a goroutine of the writer's own, from a queue: a
// client slower than the tokens never blocks the goroutine that reads a
// request's replies from rank 0 (and sends its keepalives), so rank 0
// neither times the request out nor waits on the client, and the request
// ends (and leaves the in-flight gauge) when rank 0 ends it. The queue is
// bounded by the request's tokens; a client that takes nothing for the
// stall bound is dropped.
type sseWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	stall   time.Duration
	broken  func() // called once, on the writer's goroutine, when a write fails
	started bool   // an event was queued: the writer runs
	pending []any  // events held until the first token

	mu       sync.Mutex
	queue    [][]byte // encoded events not yet written
	closed   bool     // done: no more events
	dead     bool     // a write failed: the client is gone
	wake     chan struct{}
	finished chan struct{} // closed when the writer has returned
}

func newSSE(w http.ResponseWriter, stall time.Duration, broken func()) *sseWriter {
	return &sseWriter{w: w, rc: http.NewResponseController(w), stall: stall, broken: broken,
		wake: make(chan struct{}, 1), finished: make(chan struct{})}
}

// start queues the held events and starts the writer.
func (s *sseWriter) start() {
	if s.started {
		return
	}
	s.started = true
	go s.run() // owned: done waits for it
	pending := s.pending
	s.pending = nil
	for _, v := range pending {
		s.enqueue(event(v))
	}
}

func event(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	return append(append([]byte("data: "), b...), '\n', '\n')
}

// send queues one data event carrying v as JSON.
func (s *sseWriter) send(v any) {
	s.start()
	s.enqueue(event(v))
}

func (s *sseWriter) enqueue(b []byte) {
	if b == nil {
		return
	}
	s.mu.Lock()
	if !s.dead {
		s.queue = append(s.queue, b)
	}
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// done ends the stream with OpenAI's terminator and returns once the
// writer has written everything, or given up on the client.
func (s *sseWriter) done() {
	s.start()
	s.enqueue([]byte("data: [DONE]\n\n"))
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	<-s.finished
}

// run writes the headers, then the queued events as they come, until done.
func (s *sseWriter) run() {
	defer close(s.finished)
	h := s.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // proxies: don't buffer the stream
	s.w.WriteHeader(http.StatusOK)
	for {
		s.mu.Lock()
		batch, closed := s.queue, s.closed
		s.queue = nil
		s.mu.Unlock()
		if len(batch) > 0 && !s.write(batch) {
			return
		}
		if closed && len(batch) == 0 {
			// The connection may serve another request: no bound left.
			_ = s.rc.SetWriteDeadline(time.Time{})
			return
		}
		if len(batch) == 0 {
			<-s.wake
		}
	}
}

// write writes a batch of events and flushes it, each write bounded by
// the stall bound; false if the client is gone.
func (s *sseWriter) write(batch [][]byte) bool {
	_ = s.rc.SetWriteDeadline(time.Now().Add(s.stall)) // not supported: no bound
	for _, b := range batch {
		if _, err := s.w.Write(b); err != nil {
			return s.fail()
		}
	}
	if err := s.rc.Flush(); err != nil {
		return s.fail()
	}
	return true
}

func (s *sseWriter) fail() bool {
	s.mu.Lock()
	s.dead, s.queue = true, nil
	s.mu.Unlock()
	if s.broken != nil {
		s.broken()
	}
	return false
}
