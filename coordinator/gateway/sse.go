package gateway

import (
	"encoding/json"
	"net/http"
)

// sseWriter writes server-sent events. Headers go out with the first
// event, so a request refused before any token (an overloaded job, say)
// still gets its HTTP status. Callers serialise calls.
type sseWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	started bool
	pending []any // events held until the first token
	broken  bool  // a write failed: the client is gone
}

func newSSE(w http.ResponseWriter) *sseWriter {
	return &sseWriter{w: w, rc: http.NewResponseController(w)}
}

func (s *sseWriter) start() {
	if s.started {
		return
	}
	s.started = true
	h := s.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // proxies: don't buffer the stream
	s.w.WriteHeader(http.StatusOK)
	pending := s.pending
	s.pending = nil
	for _, v := range pending {
		s.write(v)
	}
}

// send writes one data event carrying v as JSON.
func (s *sseWriter) send(v any) {
	s.start()
	s.write(v)
	if !s.broken {
		_ = s.rc.Flush()
	}
}

func (s *sseWriter) write(v any) {
	if s.broken {
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		return
	}
	b = append(append([]byte("data: "), b...), '\n', '\n')
	if _, err := s.w.Write(b); err != nil {
		s.broken = true
	}
}

// done ends the stream with OpenAI's terminator.
func (s *sseWriter) done() {
	s.start()
	if !s.broken {
		_, _ = s.w.Write([]byte("data: [DONE]\n\n"))
		_ = s.rc.Flush()
	}
}
