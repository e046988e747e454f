package broadcast

import (
	"encoding/binary"
	"fmt"
	"math"
	"sync"
)

// Message kinds of gap recovery.
const (
	KindReplayRequest = 'R'
	KindReplayReply   = 'P'
)

// ReplayRequest asks rank 0 for steps From..To (inclusive) of Epoch.
type ReplayRequest struct {
	Epoch    uint32
	Rank     uint32 // the asking rank, for rank 0's logs
	From, To uint64
}

// Replay reply statuses.
const (
	ReplayOK           = 0
	ReplayBeyondWindow = 1 // From is older than the oldest step kept
	ReplayWrongEpoch   = 2
)

// ReplayReply carries consecutive encoded steps starting at the request's
// From, as many as fit in one message. Oldest is the oldest step rank 0
// still keeps, so a refused requester can say how far behind it is.
type ReplayReply struct {
	Epoch  uint32
	Status uint8
	Oldest uint64
	// Leader is the publisher ID (Step.Leader) of the rank 0 that served
	// the reply: a follower refuses a reply from a rank 0 it does not
	// follow, whatever its status, before looking at the steps (which
	// carry their own leader and are checked again).
	Leader uint32
	Steps  [][]byte // each a complete Step message
}

const (
	replayRequestLen = 16 + 4 + 4 + 8 + 8 + trailerLen
	replayReplyFixed = 16 + 4 + 4 + 8 + 4 + 4
	// MaxReplaySteps bounds the steps in one reply.
	MaxReplaySteps = 4096
)

// AppendReplayRequest appends the encoding of r to dst, sealed.
func (c *Codec) AppendReplayRequest(dst []byte, r *ReplayRequest) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, replayRequestLen-trailerLen)...)
	b := dst[start:]
	putHeader(b, KindReplayRequest, c.job)
	binary.LittleEndian.PutUint32(b[16:], r.Epoch)
	binary.LittleEndian.PutUint32(b[20:], r.Rank)
	binary.LittleEndian.PutUint64(b[24:], r.From)
	binary.LittleEndian.PutUint64(b[32:], r.To)
	return c.seal(dst, start)
}

// DecodeReplayRequest decodes b into r.
func (c *Codec) DecodeReplayRequest(b []byte, r *ReplayRequest) error {
	if err := c.checkHeader(b, KindReplayRequest); err != nil {
		return err
	}
	if len(b) != replayRequestLen {
		return fmt.Errorf("%w: replay request is %d bytes, want %d", ErrShort, len(b), replayRequestLen)
	}
	r.Epoch = binary.LittleEndian.Uint32(b[16:])
	r.Rank = binary.LittleEndian.Uint32(b[20:])
	r.From = binary.LittleEndian.Uint64(b[24:])
	r.To = binary.LittleEndian.Uint64(b[32:])
	if r.From == 0 || r.To < r.From {
		return fmt.Errorf("%w: replay range %d..%d", ErrBounds, r.From, r.To)
	}
	return nil
}

// AppendReplayReply appends the encoding of r to dst, sealed.
func (c *Codec) AppendReplayReply(dst []byte, r *ReplayReply) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, replayReplyFixed)...)
	b := dst[start:]
	putHeader(b, KindReplayReply, c.job)
	binary.LittleEndian.PutUint32(b[16:], r.Epoch)
	b[20] = r.Status
	binary.LittleEndian.PutUint64(b[24:], r.Oldest)
	binary.LittleEndian.PutUint32(b[32:], uint32(len(r.Steps)))
	binary.LittleEndian.PutUint32(b[36:], r.Leader)
	for _, s := range r.Steps {
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(s)))
		dst = append(dst, s...)
	}
	return c.seal(dst, start)
}

// DecodeReplayReply decodes b into r. The steps alias b; each still has to
// pass DecodeStep (which checks its own MAC).
func (c *Codec) DecodeReplayReply(b []byte, r *ReplayReply) error {
	if err := c.checkHeader(b, KindReplayReply); err != nil {
		return err
	}
	if len(b) < replayReplyFixed+trailerLen {
		return fmt.Errorf("%w: replay reply is %d bytes", ErrShort, len(b))
	}
	body := b[:len(b)-trailerLen]
	if err := checkReserved(body[21:24]); err != nil {
		return err
	}
	r.Epoch = binary.LittleEndian.Uint32(body[16:])
	r.Status = body[20]
	r.Oldest = binary.LittleEndian.Uint64(body[24:])
	n := binary.LittleEndian.Uint32(body[32:])
	r.Leader = binary.LittleEndian.Uint32(body[36:])
	if n > MaxReplaySteps {
		return fmt.Errorf("%w: %d steps in a replay reply (max %d)", ErrBounds, n, MaxReplaySteps)
	}
	p := body[replayReplyFixed:]
	r.Steps = r.Steps[:0]
	for i := range n {
		if len(p) < 4 {
			return fmt.Errorf("%w: replay step %d length", ErrShort, i)
		}
		l := binary.LittleEndian.Uint32(p)
		p = p[4:]
		if uint64(l) > uint64(len(p)) {
			return fmt.Errorf("%w: replay step %d needs %d bytes, have %d", ErrShort, i, l, len(p))
		}
		r.Steps = append(r.Steps, p[:l:l])
		p = p[l:]
	}
	if len(p) != 0 {
		return fmt.Errorf("%w: %d bytes after the last replayed step", ErrTrailing, len(p))
	}
	return nil
}

// Window keeps the encodings of the last steps rank 0 published, so a
// follower that missed some can ask for them again. It keeps at most Steps
// steps and at most MaxBytes bytes of encodings, dropping the oldest first;
// the newest step is always kept, even alone over MaxBytes, so the step a
// follower is most likely to have missed can always be replayed. It is
// safe for concurrent use: the decode loop adds, the replay handler reads.
type Window struct {
	mu       sync.Mutex
	epoch    uint32
	steps    [][]byte // ring indexed by step % len; nil outside oldest..newest
	oldest   uint64   // oldest step kept, 0 when empty
	newest   uint64
	bytes    int // capacity of the buffers held: the memory the window pins
	maxBytes int
}

// NewWindow returns a window of at most steps steps and maxBytes bytes
// (maxBytes <= 0: no byte bound).
func NewWindow(steps, maxBytes int) *Window {
	if maxBytes <= 0 {
		maxBytes = math.MaxInt
	}
	return &Window{steps: make([][]byte, steps), maxBytes: maxBytes}
}

// Add records the encoding of step k of epoch (copied). Steps must be added
// in order; a new epoch empties the window.
func (w *Window) Add(epoch uint32, k uint64, msg []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := uint64(len(w.steps))
	if w.oldest == 0 || epoch != w.epoch || k != w.newest+1 {
		clear(w.steps)
		w.epoch, w.oldest, w.bytes = epoch, k, 0
	}
	// A full ring: step k takes the oldest step's slot, and may reuse its
	// buffer when that does not pin much more memory than k needs.
	var buf []byte
	if k-w.oldest >= n {
		buf = w.steps[k%n]
		w.evictOldest()
	}
	if cap(buf) < len(msg) || cap(buf) > 2*len(msg) {
		buf = make([]byte, len(msg))
	}
	buf = append(buf[:0], msg...)
	for w.oldest < k && w.bytes+cap(buf) > w.maxBytes {
		w.evictOldest()
	}
	w.steps[k%n] = buf
	w.bytes += cap(buf)
	w.newest = k
}

// evictOldest drops the oldest step kept, releasing its buffer.
func (w *Window) evictOldest() {
	slot := &w.steps[w.oldest%uint64(len(w.steps))]
	w.bytes -= cap(*slot)
	*slot = nil
	w.oldest++
}

// Bytes returns the memory the window's step buffers hold.
func (w *Window) Bytes() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.bytes
}

// Serve answers a replay request with as many consecutive steps from
// req.From as fit in maxBytes.
func (w *Window) Serve(req *ReplayRequest, maxBytes int) *ReplayReply {
	w.mu.Lock()
	defer w.mu.Unlock()
	rep := &ReplayReply{Epoch: w.epoch, Oldest: w.oldest}
	switch {
	case req.Epoch != w.epoch:
		rep.Status = ReplayWrongEpoch
		return rep
	case w.oldest == 0 || req.From < w.oldest:
		rep.Status = ReplayBeyondWindow
		return rep
	}
	size := replayReplyFixed + trailerLen
	for k := req.From; k <= min(req.To, w.newest) && len(rep.Steps) < MaxReplaySteps; k++ {
		s := w.steps[k%uint64(len(w.steps))]
		if size+4+len(s) > maxBytes && len(rep.Steps) > 0 {
			break
		}
		size += 4 + len(s)
		rep.Steps = append(rep.Steps, append([]byte(nil), s...))
	}
	return rep
}
