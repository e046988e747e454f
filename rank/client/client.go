package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sort"
	"time"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/broadcast/api"
)

// ErrRequestLost is returned by Generate when rank 0 is gone or no longer
// holds the request, so no reply can come.
var ErrRequestLost = errors.New("request lost")

// ErrNoAnswer is in the error of a request whose context ended before
// rank 0 said anything about it: it may not be running, or not serve this
// job.
var ErrNoAnswer = errors.New("no answer from rank 0")

type keepaliveAnswer struct {
	nobody, known bool
	gone          string // a supervisor's word that rank 0 died, and why
}

// keepaliveVerdict judges rank 0's answers to one request's keepalives. A
// client gives up after lostNobody answers in a row found nobody
// subscribed (rank 0 gone) or lostUnknown answers in a row said the
// request is not known (rank 0 restarted, or the last reply was lost), each
// run spread over at least its span. One of either is normal: rank 0
// resubscribing after a NATS reconnect, or an answer crossing the request's
// last message. The span keeps a burst from deciding: nats.go sends the
// keepalives it buffered while disconnected all at once on reconnect, and
// they may all arrive before rank 0 has resubscribed.
type keepaliveVerdict struct {
	nobody, unknown int
	since           time.Time // the first answer of the current run
}

const (
	lostNobody      = 4
	lostNobodySpan  = 2500 * time.Millisecond
	lostUnknown     = 2
	lostUnknownSpan = 300 * time.Millisecond
)

// observe records an answer received at now and reports whether the
// request is lost, and why.
func (v *keepaliveVerdict) observe(a keepaliveAnswer, now time.Time) (lost bool, why string) {
	switch {
	case a.known:
		*v = keepaliveVerdict{}
		return false, ""
	case a.nobody:
		if v.nobody == 0 {
			*v = keepaliveVerdict{since: now}
		}
		v.nobody++
		if v.nobody >= lostNobody && now.Sub(v.since) >= lostNobodySpan {
			return true, fmt.Sprintf("is gone: %d keepalives in a row over %v found nobody", v.nobody, now.Sub(v.since).Round(time.Second))
		}
	default:
		if v.unknown == 0 {
			*v = keepaliveVerdict{since: now}
		}
		v.unknown++
		if v.unknown >= lostUnknown && now.Sub(v.since) >= lostUnknownSpan {
			return true, "no longer holds this request (it restarted, or the request's last message was lost)"
		}
	}
	return false, ""
}

// Generate submits req to rank 0 and calls onToken for each streamed token
// (it may be nil). It is Stream with only a token callback.
func Generate(ctx context.Context, tr broadcast.Transport, subj broadcast.Subjects, req *api.GenerateRequest, onToken func(index int, token int32)) (*api.GenerateReply, error) {
	return Stream(ctx, tr, subj, req, Callbacks{Token: onToken})
}

// Callbacks receive a request's stream as it arrives, on the caller's
// goroutine. Either may be nil.
type Callbacks struct {
	Token func(index int, token int32)
	// Logprobs gets the logprobs of the token at index, after its Token
	// call, when the request asked for logprobs.
	Logprobs func(index int, lp *api.Logprobs)
}

// Stream submits req to rank 0 and calls cb for what streams back. It
// returns the final reply; a reply carrying an error is returned as an
// error too. While waiting it sends keepalives, so rank 0 drops the request
// if this client goes away, and rank 0's answers to them end the wait with
// ErrRequestLost if rank 0 goes away or restarts without the request; if
// ctx ends first it asks rank 0 to cancel the request and returns the
// cancelled reply (or ctx's error if none comes within a few seconds).
// Headers set on ctx with WithHeader go with the request's message (rank 0
// reads its trace context there).
//
// Across faults the request is resubmitted, continuing from the tokens
// received, until ctx ends or WithResumeWindow's window passes without a
// token (see resumable): the callbacks see each token once, in order.
func Stream(ctx context.Context, tr broadcast.Transport, subj broadcast.Subjects, req *api.GenerateRequest, cb Callbacks) (*api.GenerateReply, error) {
	return resumable(ctx, req, cb, func(r *api.GenerateRequest, cb Callbacks) (*api.GenerateReply, error) {
		return stream1(ctx, tr, subj, r, cb, func(ctx context.Context, s *stream) (func(), error) { return s.subscribe(ctx) })
	})
}

// stream1 runs one request whose replies attach delivers to s.
func stream1(ctx context.Context, tr broadcast.Transport, subj broadcast.Subjects, req *api.GenerateRequest, cb Callbacks,
	attach func(context.Context, *stream) (func(), error)) (*api.GenerateReply, error) {
	withKeepalive := *req
	withKeepalive.Keepalive = true
	data, err := json.Marshal(&withKeepalive)
	if err != nil {
		return nil, err
	}
	s := &stream{tr: tr, subj: subj, req: req, cb: cb,
		replies: make(chan []byte, 1024), overflow: make(chan struct{}), noResponders: make(chan struct{}, 1),
		acks: make(chan keepaliveAnswer, 8)}
	if rw, ok := tr.(broadcast.RefusalWatcher); ok {
		var stop func()
		s.refused, stop = rw.WatchRefusals(subj.Generate())
		defer stop()
	}
	detach, err := attach(ctx, s)
	defer detach()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errNotSubmitted, err)
	}
	if err := tr.Publish(&broadcast.Msg{Subject: subj.Generate(), Reply: s.inbox, Data: data, Header: maps.Clone(headerFrom(ctx))}); err != nil {
		return nil, fmt.Errorf("submit request: %w", err)
	}
	return s.wait(ctx)
}

// stream is one request's reply stream as Generate reads it.
type stream struct {
	tr   broadcast.Transport
	subj broadcast.Subjects
	req  *api.GenerateRequest
	cb   Callbacks

	inbox, ackInbox string
	replies         chan []byte
	overflow        chan struct{} // closed when replies overflowed
	noResponders    chan struct{}
	refused         <-chan error // the server refused the request (nil: not watched)
	acks            chan keepaliveAnswer
	heard           bool // rank 0 has answered about this request
	logprobs        []api.Logprobs
	verdict         keepaliveVerdict
}

// subscribe opens the reply inbox and the inbox where rank 0 answers
// keepalives. Its answers tell a rank 0 that died (nobody subscribed: "no
// responders") or restarted (the request unknown) from one that is merely
// slow (no answer yet). The returned function unsubscribes both.
func (s *stream) subscribe(ctx context.Context) (func(), error) {
	var unsubs []func() error
	done := func() {
		for _, u := range unsubs {
			_ = u()
		}
	}
	s.inbox, s.ackInbox = s.tr.NewInbox(), s.tr.NewInbox()
	u, err := s.tr.Subscribe(s.inbox, s.onReply)
	if err != nil {
		return done, err
	}
	unsubs = append(unsubs, u)
	if u, err = s.tr.Subscribe(s.ackInbox, s.onAck); err != nil {
		return done, err
	}
	unsubs = append(unsubs, u)
	if err := s.tr.Flush(ctx); err != nil {
		return done, fmt.Errorf("subscribe reply inbox: %w", err)
	}
	return done, nil
}

// onReply and onAck run on the transport's delivery goroutine: they hand
// off and return.
func (s *stream) onReply(m *broadcast.Msg) {
	if broadcast.IsNoResponders(m) {
		select {
		case s.noResponders <- struct{}{}:
		default:
		}
		return
	}
	select {
	case s.replies <- append([]byte(nil), m.Data...):
	default:
		select {
		case <-s.overflow:
		default:
			close(s.overflow)
		}
	}
}

func (s *stream) onAck(m *broadcast.Msg) {
	var a keepaliveAnswer
	if broadcast.IsNoResponders(m) {
		a.nobody = true
	} else {
		var ack api.KeepaliveAck
		if json.Unmarshal(m.Data, &ack) != nil {
			return
		}
		a.known, a.gone = ack.Known, ack.Gone
	}
	select {
	case s.acks <- a:
	default:
	}
}

// send publishes a message about the request on the client subject; ack,
// if set, is where rank 0 answers it.
func (s *stream) send(op, ack string) error {
	b, _ := json.Marshal(api.Message{Reply: s.inbox, Op: op})
	return s.tr.Publish(&broadcast.Msg{Subject: s.subj.Client(), Reply: ack, Data: b})
}

// wait reads the stream until the request ends.
func (s *stream) wait(ctx context.Context) (*api.GenerateReply, error) {
	keepalive := time.NewTicker(api.KeepaliveInterval)
	defer keepalive.Stop()
	var cancelled <-chan time.Time // set once a cancel was sent
	done := ctx.Done()
	for {
		select {
		case <-done:
			_ = s.send("cancel", "")
			fctx, cancel := context.WithTimeout(context.Background(), cancelGrace(ctx))
			_ = s.tr.Flush(fctx)
			cancel()
			if !s.heard {
				// Rank 0 never said it has the request: no cancelled
				// reply is coming.
				return nil, fmt.Errorf("waiting for tokens: %w: %w of job %q", ctx.Err(), ErrNoAnswer, s.subj.Job)
			}
			done = nil
			keepalive.Stop() // only the cancelled reply matters now
			t := time.NewTimer(cancelGrace(ctx))
			defer t.Stop()
			cancelled = t.C
		case err := <-s.refused:
			return nil, fmt.Errorf("submit to job %q: %w", s.subj.Job, err)
		case <-cancelled:
			return nil, fmt.Errorf("waiting for tokens: %w", ctx.Err())
		case <-keepalive.C:
			// A connection closed for good (the server gone, reconnects
			// exhausted) would otherwise leave us waiting for a reply that
			// cannot come until ctx ends.
			if err := s.send("keepalive", s.ackInbox); errors.Is(err, broadcast.ErrClosed) {
				return nil, fmt.Errorf("waiting for tokens: connection to NATS lost: %w", err)
			}
		case a := <-s.acks:
			if cancelled == nil {
				if rep, done, err := s.judge(a); done {
					return rep, err
				}
			}
		case <-s.overflow:
			return nil, ErrOverflow
		case <-s.noResponders:
			return nil, fmt.Errorf("no rank 0 serves job %q on %s (%w)", s.subj.Job, s.subj.Generate(), broadcast.ErrNoResponders)
		case b := <-s.replies:
			if rep, done, err := s.handle(b); done || err != nil {
				return rep, err
			}
		}
	}
}

// judge takes rank 0's answer to a keepalive. Replies already queued are
// news from rank 0 that came before this answer (the final reply and a
// "not known" may arrive together): they are read first.
func (s *stream) judge(a keepaliveAnswer) (*api.GenerateReply, bool, error) {
	s.heard = s.heard || a.known
	for len(s.replies) > 0 {
		if rep, done, err := s.handle(<-s.replies); done || err != nil {
			return rep, true, err
		}
	}
	if a.gone != "" {
		return nil, true, fmt.Errorf("waiting for tokens: %s: %w", a.gone, ErrRequestLost)
	}
	if lost, why := s.verdict.observe(a, time.Now()); lost {
		return nil, true, fmt.Errorf("waiting for tokens: rank 0 of job %q %s: %w", s.subj.Job, why, ErrRequestLost)
	}
	return nil, false, nil
}

// handle takes one reply; done reports the request's end (rep and err are
// then what Generate returns), as does a malformed reply (err).
func (s *stream) handle(b []byte) (rep *api.GenerateReply, done bool, err error) {
	s.verdict = keepaliveVerdict{} // rank 0 is there and has the request
	s.heard = true
	if tok, index, ok := parseTokenReply(b); ok {
		if s.cb.Token != nil {
			s.cb.Token(index, tok)
		}
		return nil, false, nil
	}
	var r api.GenerateReply
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, true, fmt.Errorf("malformed reply from rank 0: %w", err)
	}
	if r.Token != nil && s.cb.Token != nil {
		s.cb.Token(r.Index, *r.Token)
	}
	if r.Logprobs != nil {
		if r.Index < 0 || r.Index > s.req.MaxTokens {
			return nil, true, fmt.Errorf("malformed reply from rank 0: logprobs for token %d of at most %d", r.Index, s.req.MaxTokens)
		}
		for len(s.logprobs) <= r.Index {
			s.logprobs = append(s.logprobs, api.Logprobs{Token: -1})
		}
		s.logprobs[r.Index] = *r.Logprobs
		if s.cb.Logprobs != nil {
			s.cb.Logprobs(r.Index, r.Logprobs)
		}
	}
	if !r.Done {
		return nil, false, nil
	}
	r.TokenLogprobs = s.logprobs
	if r.Error != "" {
		return &r, true, fmt.Errorf("rank 0: %s", r.Error)
	}
	return &r, true, nil
}

// CollectStatus asks every rank for its status and gathers the replies
// until world-size ranks have answered (the world size comes from the
// replies) or wait has passed. Ranks are sorted by rank.
func CollectStatus(ctx context.Context, tr broadcast.Transport, subj broadcast.Subjects, wait time.Duration) ([]api.RankStatus, error) {
	inbox := tr.NewInbox()
	replies := make(chan []byte, 256)
	unsub, err := tr.Subscribe(inbox, func(m *broadcast.Msg) {
		select {
		case replies <- append([]byte(nil), m.Data...):
		default:
		}
	})
	if err != nil {
		return nil, err
	}
	defer func() { _ = unsub() }()
	if err := tr.Flush(ctx); err != nil {
		return nil, err
	}
	var refused <-chan error
	if rw, ok := tr.(broadcast.RefusalWatcher); ok {
		var stop func()
		refused, stop = rw.WatchRefusals(subj.Status())
		defer stop()
	}
	if err := tr.Publish(&broadcast.Msg{Subject: subj.Status(), Reply: inbox}); err != nil {
		return nil, err
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	seen := map[int]api.RankStatus{}
	world := -1
	for world < 0 || len(seen) < world {
		select {
		case <-ctx.Done():
			return sorted(seen), ctx.Err()
		case <-timer.C:
			return sorted(seen), nil
		case err := <-refused:
			return nil, fmt.Errorf("status of job %q: %w", subj.Job, err)
		case b := <-replies:
			var st api.RankStatus
			if err := json.Unmarshal(b, &st); err != nil {
				continue
			}
			seen[st.Rank] = st
			world = max(world, st.World)
		}
	}
	return sorted(seen), nil
}

func sorted(m map[int]api.RankStatus) []api.RankStatus {
	out := make([]api.RankStatus, 0, len(m))
	for _, s := range m {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Rank < out[j].Rank })
	return out
}
