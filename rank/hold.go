package rank

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/broadcast/api"
)

// StateReforming is the status state of a rank between two epochs, waiting
// for the world to re-form (--on-peer-loss wait).
const StateReforming = "reforming"

// ErrReforming is the answer to a request that arrives while rank 0 waits
// for the world to re-form.
var ErrReforming = errors.New("unavailable: rank 0 is waiting for the world to re-form after a peer loss (--on-peer-loss wait); retry later")

// Hold answers for a rank while no decode loop runs, between two epochs:
// status requests get the rank's last status in state "reforming". On rank
// 0 it also keeps the held requests' clients informed: their keepalives
// are acknowledged, a cancel ends the request at once, and a new request
// is refused with ErrReforming rather than met by nobody.
type Hold struct {
	tr     broadcast.Transport
	status api.RankStatus
	unsubs []func() error

	mu     sync.Mutex
	held   []*Request // rank 0: the requests to resume, in sequence order
	closed bool       // handlers still running after Close do nothing
}

// NewHold subscribes the job's status subject (and, when last is rank 0's
// status, its generate and client subjects) and answers for the rank until
// Close. held are rank 0's requests carried into the next epoch.
func NewHold(tr broadcast.Transport, subj broadcast.Subjects, last api.RankStatus, held []*Request) (*Hold, error) {
	last.State, last.Phase, last.PhaseMs = StateReforming, "", 0
	last.Rows, last.Waiting = 0, len(held)
	h := &Hold{tr: tr, status: last, held: slices.Clone(held)}
	type handler struct {
		subject string
		fn      func(*broadcast.Msg)
	}
	subs := []handler{{subj.Status(), h.onStatus}}
	if last.Rank == 0 {
		subs = append(subs, handler{subj.Generate(), h.onGenerate}, handler{subj.Client(), h.onClient})
	}
	for _, s := range subs {
		u, err := tr.Subscribe(s.subject, s.fn)
		if err != nil {
			h.Close()
			return nil, err
		}
		h.unsubs = append(h.unsubs, u)
	}
	return h, nil
}

// Close stops answering and returns the requests still held (those not
// cancelled meanwhile).
func (h *Hold) Close() []*Request {
	for _, u := range h.unsubs {
		_ = u()
	}
	h.unsubs = nil
	h.mu.Lock()
	defer h.mu.Unlock()
	// A handler already running when its subscription ended (NATS does
	// not wait for it) sees closed and leaves the requests alone.
	h.closed = true
	held := h.held
	h.held = nil
	return held
}

// Fail stops answering and ends every request still held with err.
func (h *Hold) Fail(err error) {
	for _, r := range h.Close() {
		tokens := r.Output
		if tokens == nil {
			tokens = []int32{}
		}
		endSpan(r, api.FinishError, err, time.Now())
		// Unavailable: the job may come back, and the client may submit
		// the request again from its tokens.
		h.publish(r.Tag, api.GenerateReply{Done: true, FinishReason: api.FinishError, Tokens: tokens, Error: err.Error(), ErrorCode: api.CodeUnavailable})
	}
	_ = h.tr.Flush(context.Background())
}

func (h *Hold) publish(subject string, v any) {
	data, _ := json.Marshal(v)
	_ = h.tr.Publish(&broadcast.Msg{Subject: subject, Data: data})
}

func (h *Hold) onStatus(m *broadcast.Msg) {
	if m.Reply == "" {
		return
	}
	h.mu.Lock()
	st, closed := h.status, h.closed
	st.Waiting = len(h.held)
	h.mu.Unlock()
	if !closed {
		h.publish(m.Reply, st)
	}
}

func (h *Hold) onGenerate(m *broadcast.Msg) {
	h.mu.Lock()
	closed := h.closed
	h.mu.Unlock()
	if m.Reply == "" || closed {
		return
	}
	rep := api.FailedReply(ErrReforming, api.CodeUnavailable)
	rep.Tokens = []int32{}
	h.publish(m.Reply, rep)
}

func (h *Hold) onClient(m *broadcast.Msg) {
	var c api.Message
	if err := json.Unmarshal(m.Data, &c); err != nil || c.Reply == "" {
		return
	}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	i := slices.IndexFunc(h.held, func(r *Request) bool { return r.Tag == c.Reply })
	if i >= 0 && c.Op == "keepalive" {
		h.held[i].LastKeepalive = time.Now()
	}
	var cancelled *Request
	if i >= 0 && c.Op == "cancel" {
		cancelled = h.held[i]
		h.held = slices.Delete(h.held, i, i+1)
	}
	h.mu.Unlock()
	switch {
	case c.Op == "keepalive" && m.Reply != "":
		h.publish(m.Reply, api.KeepaliveAck{Known: i >= 0})
	case cancelled != nil:
		tokens := cancelled.Output
		if tokens == nil {
			tokens = []int32{}
		}
		endSpan(cancelled, api.FinishCancelled, nil, time.Now())
		h.publish(cancelled.Tag, api.GenerateReply{Done: true, FinishReason: api.FinishCancelled, Tokens: tokens, Error: "cancelled by the client"})
	}
}
