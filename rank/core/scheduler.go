package core

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/internal/fielderr"
)

// ErrOverloaded is returned by Submit when the queue is full.
var ErrOverloaded = errors.New("overloaded: request queue is full")

// Overloaded is the one way a request refused for a full queue is told so,
// whichever queue (the scheduler's, or the intake in front of it) was full.
func Overloaded(waiting int) error {
	return fmt.Errorf("%w (%d waiting); retry later", ErrOverloaded, waiting)
}

// Request is one generation request as rank 0 tracks it.
type Request struct {
	Seq uint64 // assigned by Submit
	// ID is the requester's name for it across resubmissions ("" for
	// none): a request submitted with the ID of an open one supersedes it.
	ID        string
	Prompt    []int32
	MaxTokens int
	Params    api.Params
	Output    []int32
	Finish    string
	Err       error
	// Fed is how many of its first tokens (prompt, then output) the
	// workers' caches hold once the last scheduled step has run: 0 while
	// it waits, its length once its prefill is done. A preempted or
	// resumed request starts again from 0, or from the prefix it finds
	// in the KV cache.
	Fed int

	// Tag is the driver's handle for the requester (its reply subject):
	// the key of its cancels and keepalives.
	Tag string

	// Keepalives: the client promised keepalives when it submitted.
	Keepalives bool
	// LastKeepalive is when its client's last keepalive reached rank 0
	// (zero: none yet). Carried across epochs, it marks a client that
	// sends them, so one that went away while the world re-formed is
	// still timed out.
	LastKeepalive time.Time
	// Ext is the driver's own state of the request (its timings and
	// tracing), carried with it across epochs. The core never reads it.
	Ext any

	// With prefix caching: hashes are the chained hashes of its full
	// blocks computed so far (its tokens only ever grow, so they stay
	// valid), and registered the blocks of its table the cache has been
	// told about (they were full, and fed by a pass that has run).
	hashes     []BlockHash
	registered int
}

// length is the request's prompt and output so far.
func (r *Request) length() int { return len(r.Prompt) + len(r.Output) }

// token is the request's token i: prompt, then output.
func (r *Request) token(i int) int32 {
	if i < len(r.Prompt) {
		return r.Prompt[i]
	}
	return r.Output[i-len(r.Prompt)]
}

// Event is something a requester must hear about after a step: a new
// token, the end of its request, or both.
type Event struct {
	Req   *Request
	Token int32 // NoToken when the event carries none
	Index int   // position of Token in the output
	Done  bool  // Req.Finish says why
}

// SchedulerConfig bounds what rank 0 admits.
type SchedulerConfig struct {
	MaxBatch int   // rows per step
	MaxQueue int   // requests waiting for a row
	EOS      int32 // end-of-sequence token, -1 for none
	// MaxStepBytes bounds a step's encoding; admissions that would exceed
	// it wait for a later step (0: no bound).
	MaxStepBytes int
	// MaxBatchTokens bounds the tokens (prompt and output) of all rows in
	// the batch; the head of the queue waits until it fits, so nobody is
	// overtaken and nobody waits forever. A request alone in the batch is
	// always admitted. 0: no bound.
	MaxBatchTokens int
	// KV, if set, is the KV cache the rows' tokens live in: a request is
	// admitted only when its tokens' blocks fit (leaving the watermark
	// free), every step first grows the running rows' tables to the
	// tokens they feed, and when a row cannot grow, the most recently
	// admitted running request is preempted: its blocks are freed and it
	// waits again at the front of the queue with the tokens it has, to be
	// recomputed when blocks free up. nil: memory is not scheduled.
	KV *KVConfig
	// MaxModelLen is the most tokens, prompt and output, of one sequence:
	// the model's context, or less. A request asking for more is refused.
	// 0: no bound.
	MaxModelLen int
	// MaxNumBatchedTokens bounds the tokens one forward pass feeds,
	// summed over its rows: one per decoding row, then what is left to the
	// prompt being prefilled and to admissions, whose prompts are fed in
	// chunks when they do not fit. 0: no bound; otherwise at least
	// MaxBatch, so that every decoding row always fits.
	MaxNumBatchedTokens int
	// PrefixCaching, with KV, keeps the full blocks of every sequence
	// findable by content after their forward pass has run, and starts a
	// request admitted later with the longest prefix of its tokens found
	// there: it shares those blocks and computes only the rest. Off (or
	// without KV): every request computes all its tokens.
	PrefixCaching bool
}

// Validate reports a bound that cannot work.
func (c SchedulerConfig) Validate() error {
	if c.MaxNumBatchedTokens < 0 || (c.MaxNumBatchedTokens > 0 && c.MaxNumBatchedTokens < c.MaxBatch) {
		return fmt.Errorf("MaxNumBatchedTokens (%d) must be at least MaxBatch (%d), or 0 for no bound", c.MaxNumBatchedTokens, c.MaxBatch)
	}
	return nil
}

// Scheduler is rank 0's pure scheduling logic: a FIFO queue, the set of
// admitted requests, and the tokens and removals that the next step must
// carry. It assigns sequence IDs, so it is the only source of them.
type Scheduler struct {
	cfg      SchedulerConfig
	waiting  []*Request
	active   map[uint64]*Request
	byTag    map[string]*Request // the open requests, waiting or active, by reply subject
	byID     map[string]*Request // those of them with an ID, by ID
	nextSeq  uint64
	tokens   []broadcast.Token
	removals []uint64
	// running are the admitted requests in admission order (the last is
	// preempted first, the first is fed first).
	running []*Request
	// With KV: the pool and the preemptions so far.
	blocks      *Blocks
	preemptions uint64
	preempted   []*Request // by the last Next
	// With prefix caching: the hashes of the blocks this step's pass
	// fills (registered at the next Next), the tokens looked up and
	// found at admissions, and a buffer for a block's tokens.
	pending       map[BlockHash]struct{}
	queries, hits uint64
	scratch       []int32
}

// NewScheduler returns an empty scheduler.
func NewScheduler(cfg SchedulerConfig) (*Scheduler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Scheduler{cfg: cfg, active: map[uint64]*Request{}, byTag: map[string]*Request{}, byID: map[string]*Request{}, nextSeq: 1}
	if cfg.KV != nil {
		b, err := NewBlocks(*cfg.KV)
		if err != nil {
			return nil, err
		}
		s.blocks = b
		if cfg.PrefixCaching {
			s.pending = map[BlockHash]struct{}{}
		}
	}
	return s, nil
}

// Submit queues r and assigns its sequence ID.
func (s *Scheduler) Submit(r *Request) error {
	return s.submit(r, false)
}

// SubmitReplacing is Submit for a request that replaces one just cancelled
// (a resubmission of the same ID): it takes the place of that one, so a
// full queue does not refuse it.
func (s *Scheduler) SubmitReplacing(r *Request) error {
	return s.submit(r, true)
}

func (s *Scheduler) submit(r *Request, replacing bool) error {
	if err := s.fits(r); err != nil {
		return err
	}
	if len(s.waiting) >= s.cfg.MaxQueue && !replacing {
		return Overloaded(len(s.waiting))
	}
	r.Seq = s.nextSeq
	s.nextSeq++
	s.waiting = append(s.waiting, r)
	s.open(r)
	return nil
}

// open and close keep the maps of the open requests.
func (s *Scheduler) open(r *Request) {
	s.byTag[r.Tag] = r
	if r.ID != "" {
		s.byID[r.ID] = r
	}
}

func (s *Scheduler) close(r *Request) {
	if s.byTag[r.Tag] == r {
		delete(s.byTag, r.Tag)
	}
	if r.ID != "" && s.byID[r.ID] == r {
		delete(s.byID, r.ID)
	}
}

// FindID returns the open request with ID id ("" finds none), or nil.
func (s *Scheduler) FindID(id string) *Request {
	if id == "" {
		return nil
	}
	return s.byID[id]
}

// Request returns the admitted request with sequence ID seq, or nil.
func (s *Scheduler) Request(seq uint64) *Request { return s.active[seq] }

// Waiting counts the requests queued for admission.
func (s *Scheduler) Waiting() int { return len(s.waiting) }

// Active counts the admitted requests, those with a row in the batch.
func (s *Scheduler) Active() int { return len(s.active) }

// Idle reports whether there is nothing to step: no rows, nothing owed to
// the followers, nobody waiting.
func (s *Scheduler) Idle() bool {
	return len(s.active) == 0 && len(s.waiting) == 0 && len(s.tokens) == 0 && len(s.removals) == 0
}

// Next builds step k of epoch: the tokens sampled at step k-1, the
// sequences that finished then (or are preempted now), the tokens every
// running row feeds, and as many waiting requests as fit, oldest first,
// with their KV blocks, the prefill chunks and, with prefix caching, the
// cached prefixes they start with. It returns nil when the scheduler is
// idle.
func (s *Scheduler) Next(epoch uint32, k uint64) *broadcast.Step {
	if s.Idle() {
		return nil
	}
	st := &broadcast.Step{Epoch: epoch, Step: k, Tokens: s.tokens, Removed: s.removals}
	s.tokens, s.removals = nil, nil
	clear(s.preempted)
	s.preempted = s.preempted[:0]
	s.cacheFed() // before the removals free them
	for _, id := range st.Removed {
		if r := s.active[id]; r != nil {
			s.close(r)
		}
		s.leave(id)
	}
	left := s.feedRunning()
	preempted := s.blocks != nil && s.growRunning(st)
	for _, r := range s.running {
		if r.Fed < r.length() {
			st.Chunks = append(st.Chunks, broadcast.Chunk{Seq: r.Seq, Fed: uint32(r.Fed)})
		}
		s.markPending(r)
	}
	if !preempted { // after a preemption, admitting would only thrash
		s.admit(st, left)
	}
	return st
}

// feedRunning sets the Fed every running row reaches in this step and
// returns the budget left for admissions. Decoding rows come first, one
// token each (the budget is at least MaxBatch, so they always fit); the
// row being prefilled (there is at most one) takes what they leave.
func (s *Scheduler) feedRunning() int {
	left := s.cfg.MaxNumBatchedTokens
	if left <= 0 {
		left = math.MaxInt
	}
	for _, r := range s.running {
		if n := r.length(); r.Fed >= n-1 {
			left -= n - r.Fed
			r.Fed = n
		}
	}
	for _, r := range s.running {
		if feed := min(r.length()-r.Fed, left); feed > 0 {
			r.Fed += feed
			left -= feed
		}
	}
	return left
}

// admit moves waiting requests into st's batch, oldest first, while the
// batch's rows, tokens, step bytes, KV blocks and the step's token budget
// (left) allow. Each starts with its cached prefix, if any, and feeds as
// much of the rest as the budget leaves; one that cannot feed it all is
// prefilled in chunks over the next steps and is the last admitted. The
// head waits a step, and everyone behind it, when the block after its
// cached prefix is being computed for another row in this step.
func (s *Scheduler) admit(st *broadcast.Step, left int) {
	size := broadcast.StepSize(st)
	tokens := 0
	if s.cfg.MaxBatchTokens > 0 {
		for _, r := range s.active {
			tokens += r.length()
		}
	}
	for len(s.waiting) > 0 && len(s.active) < s.cfg.MaxBatch && left > 0 {
		r := s.waiting[0]
		need := r.length()
		hit, cached, wait := s.lookup(r)
		if wait {
			break // its next block is being computed: it will hit it
		}
		feed := min(need-cached, left)
		if s.cfg.MaxBatchTokens > 0 && len(s.active) > 0 && tokens+need > s.cfg.MaxBatchTokens {
			break // the head waits until rows finish; nobody overtakes it
		}
		if s.blocks != nil && !s.blocks.CanAdmitHit(hit, cached+feed) {
			break // likewise, until blocks free up
		}
		tokens += need
		n := s.admissionBytes(need, cached, feed)
		if s.cfg.MaxStepBytes > 0 && len(st.Admitted) > 0 && size+n > s.cfg.MaxStepBytes {
			break // the rest go in later steps
		}
		size += n
		left -= feed
		s.join(st, r, hit, feed)
		if r.Fed < need {
			st.Chunks = append(st.Chunks, broadcast.Chunk{Seq: r.Seq, Fed: uint32(r.Fed)})
			break // one prompt is prefilled at a time
		}
	}
}

// admissionBytes is what admitting a request of need tokens, cached of
// them found in the cache and feed more computed, adds to the step: the
// admission, its grant, its chunk, its hit.
func (s *Scheduler) admissionBytes(need, cached, feed int) int {
	n := broadcast.AdmissionSize(need)
	if s.blocks != nil {
		if b := s.blocks.Config().Need(cached + feed); b > 0 {
			n += broadcast.GrantSize(b)
		}
	}
	if cached+feed < need {
		n += broadcast.ChunkSize
	}
	if cached > 0 {
		n += broadcast.HitSize
	}
	return n
}

// join takes the head of the queue, r, into st's batch: it shares hit
// (the blocks of its cached prefix, if any) and feeds feed tokens after
// them, with the blocks they need (CanAdmitHit said they fit). Its grant
// lists the shared blocks first, then the new ones: its whole table.
func (s *Scheduler) join(st *broadcast.Step, r *Request, hit []BlockID, feed int) {
	s.waiting = s.waiting[1:]
	s.active[r.Seq] = r
	s.running = append(s.running, r)
	st.Admitted = append(st.Admitted, broadcast.Admission{Seq: r.Seq, Prompt: r.Prompt, Output: r.Output})
	r.Fed = feed
	if s.blocks == nil {
		return
	}
	cached := len(hit) * s.blocks.Config().BlockSize
	r.Fed += cached
	if len(hit) > 0 {
		// The hit is Match's, on this pool, unchanged since: it shares.
		_ = s.blocks.Share(r.Seq, hit)
		st.Hits = append(st.Hits, broadcast.Hit{Seq: r.Seq, Tokens: uint32(cached)})
	}
	s.blocks.Grow(r.Seq, r.Fed)
	grant(st, r.Seq, s.blocks.Table(r.Seq))
	r.registered = len(hit)
	if s.pending != nil {
		s.queries += uint64(r.length())
		s.hits += uint64(cached)
		s.markPending(r)
	}
}

// grant records in st the blocks added to seq's table (none: nothing).
func grant(st *broadcast.Step, seq uint64, added []BlockID) {
	if len(added) == 0 {
		return
	}
	g := broadcast.Grant{Seq: seq, Blocks: make([]uint32, len(added))}
	for i, b := range added {
		g.Blocks[i] = uint32(b)
	}
	st.Grants = append(st.Grants, g)
}

// leave drops sequence id from the batch, and its blocks.
func (s *Scheduler) leave(id uint64) {
	delete(s.active, id)
	if i := slices.IndexFunc(s.running, func(r *Request) bool { return r.Seq == id }); i >= 0 {
		s.running = slices.Delete(s.running, i, i+1)
	}
	if s.blocks != nil {
		s.blocks.Release(id)
	}
}

// growRunning gives every running row the blocks for the tokens it has
// fed once this step has run (its Fed), oldest first, and records them in
// st. A row that cannot grow preempts the most recently admitted running
// request, until it can or is itself preempted. Rows are grown in the
// order they are preempted from the other end, so a preempted row never
// has a grant in st. It reports whether any was preempted.
func (s *Scheduler) growRunning(st *broadcast.Step) bool {
	preempted := false
	for i := 0; i < len(s.running); i++ {
		r := s.running[i]
		for {
			if added, ok := s.blocks.Grow(r.Seq, r.Fed); ok {
				grant(st, r.Seq, added)
				break
			}
			victim := s.running[len(s.running)-1]
			s.preempt(victim, st)
			preempted = true
			if victim == r {
				break
			}
		}
	}
	return preempted
}

// preempt frees r's blocks and removes its row in st; r waits at the
// front of the queue with the tokens it has, to be prefilled again.
func (s *Scheduler) preempt(r *Request, st *broadcast.Step) {
	s.leave(r.Seq)
	r.Fed, r.registered = 0, 0
	st.Removed = append(st.Removed, r.Seq)
	s.waiting = slices.Insert(s.waiting, 0, r)
	s.preemptions++
	s.preempted = append(s.preempted, r)
}

// Preempted are the requests the last Next preempted (valid until the
// next call).
func (s *Scheduler) Preempted() []*Request { return s.preempted }

// ErrNeverFits refuses a request that could never run: its prompt and
// output are longer than the model's context (MaxModelLen), or than the
// whole KV cache (less its watermark) can hold.
var ErrNeverFits = errors.New("the request does not fit in the KV cache")

// fits refuses a request that no amount of waiting would admit: its
// prompt and max_tokens need more blocks than admission can ever give
// (the pool less its watermark).
func (s *Scheduler) fits(r *Request) error {
	if n, limit := len(r.Prompt)+r.MaxTokens, s.cfg.MaxModelLen; limit > 0 && n > limit {
		return refusal{ErrNeverFits, fielderr.New("max_tokens", "This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the prompt, %d in the completion). Please reduce the length of the prompt or completion.",
			limit, n, len(r.Prompt), r.MaxTokens)}
	}
	if s.blocks == nil {
		return nil
	}
	kv := s.blocks.Config()
	total := len(r.Prompt) + max(r.MaxTokens, len(r.Output)) // both bounded by the request's validation
	if need, most := kv.Need(total), kv.Blocks-kv.Watermark; need > most {
		return fielderr.New("max_tokens", "%w: the prompt (%d tokens) and max_tokens (%d) need %d blocks of %d tokens, and at most %d blocks (%d tokens) can be given to one request",
			ErrNeverFits, len(r.Prompt), r.MaxTokens, need, kv.BlockSize, most, most*kv.BlockSize)
	}
	return nil
}

// refusal is a request's error (what its requester reads) that is also
// of a kind (errors.Is).
type refusal struct {
	kind error
	error
}

func (r refusal) Unwrap() []error { return []error{r.kind, r.error} }

// Preemptions counts the requests preempted so far.
func (s *Scheduler) Preemptions() uint64 { return s.preemptions }

// PrefixCache counts, in tokens, what admissions looked up in the prefix
// cache (every admitted request's length) and found there.
func (s *Scheduler) PrefixCache() (queries, hits uint64) { return s.queries, s.hits }

// Blocks is the KV block manager (nil without KV).
func (s *Scheduler) Blocks() *Blocks { return s.blocks }

// Sampled records the tokens sampled for rows (the batch of the step just
// run, in row order) and returns what each requester must be told. A token
// that ends its request is still carried by the next step, which also
// removes the sequence, so every rank's mirror sees the same history. A
// row still being prefilled was not sampled: whatever tokens says, the
// next step carries NoToken for it, and it neither ends nor fails.
func (s *Scheduler) Sampled(rows []*Seq, tokens []int32, errs []error) []Event {
	events := make([]Event, 0, len(rows))
	for i, row := range rows {
		if row.Prefilling() {
			s.tokens = append(s.tokens, broadcast.Token{Seq: row.ID, Token: NoToken})
			continue
		}
		r := s.active[row.ID]
		tok := tokens[i]
		if errs != nil && errs[i] != nil {
			tok = NoToken
		}
		s.tokens = append(s.tokens, broadcast.Token{Seq: row.ID, Token: tok})
		if r == nil || r.Finish != "" {
			continue // finished earlier (cancelled), removal already queued
		}
		ev := Event{Req: r, Token: tok, Index: len(r.Output)}
		switch tok {
		case NoToken:
			r.Finish = api.FinishError
			if errs != nil {
				r.Err = errs[i]
			}
			if r.Err == nil { // a picker that left a row empty without saying why
				r.Err = fmt.Errorf("no token was sampled for sequence %d", row.ID)
			}
		default:
			r.Output = append(r.Output, tok)
			if stop := s.isStop(r, tok); stop && len(r.Output) >= r.Params.MinTokens {
				r.Finish = api.FinishStop
			} else if len(r.Output) >= r.MaxTokens {
				r.Finish = api.FinishLength
			}
		}
		if r.Finish != "" {
			ev.Done = true
			s.removals = append(s.removals, row.ID)
		}
		events = append(events, ev)
	}
	return events
}

func (s *Scheduler) isStop(r *Request, tok int32) bool { return IsStop(&r.Params, s.cfg.EOS, tok) }

// IsStop reports whether tok ends a request of parameters p in a job whose
// EOS is eos: EOS (unless ignore_eos) or one of its stop tokens (past
// min_tokens, which the caller counts).
func IsStop(p *api.Params, eos, tok int32) bool {
	if tok == eos && !p.IgnoreEOS {
		return true
	}
	return slices.Contains(p.StopTokenIDs, tok)
}

// Cancel ends the request whose Tag is tag, if it is still open: a waiting
// one leaves the queue, an admitted one is removed by the next step (its
// last sampled token still travels with that step, as for any finished
// row). It returns the request, or nil if none is open under tag.
func (s *Scheduler) Cancel(tag string, why error) *Request {
	r := s.byTag[tag]
	switch {
	case r == nil || r.Finish != "":
		return nil
	case s.active[r.Seq] == r:
		s.removals = append(s.removals, r.Seq)
		if s.byID[r.ID] == r {
			delete(s.byID, r.ID) // a resubmission may take its ID now
		}
	default:
		if i := slices.Index(s.waiting, r); i >= 0 {
			s.waiting = slices.Delete(s.waiting, i, i+1)
		}
		s.close(r)
	}
	r.Finish, r.Err = api.FinishCancelled, why
	return r
}

// Find returns the request whose reply subject is tag if it is waiting or
// in the batch, else nil. A request that finished stays in the batch until
// the next step removes it, which is after its final reply has gone out (a
// final reply held back for logprobs goes out during that step).
func (s *Scheduler) Find(tag string) *Request { return s.byTag[tag] }

// Resume queues requests carried over from the previous epoch ahead of
// everything else, keeping their sequence IDs and the tokens they have.
// Call it before any Submit.
func (s *Scheduler) Resume(reqs []*Request) {
	for _, r := range reqs {
		s.nextSeq = max(s.nextSeq, r.Seq+1)
		r.Fed = 0 // the new epoch's workers hold none of it
		// Its hashes may be of another block size; the new pool
		// caches nothing yet anyway.
		r.hashes, r.registered = nil, 0
	}
	s.waiting = append(slices.Clone(reqs), s.waiting...)
	for _, r := range reqs {
		s.open(r)
	}
}

// InFlight returns the unfinished requests, admitted or waiting, in
// sequence order.
func (s *Scheduler) InFlight() []*Request {
	var out []*Request
	for _, r := range s.active {
		if r.Finish == "" {
			out = append(out, r)
		}
	}
	out = append(out, s.waiting...)
	slices.SortFunc(out, func(a, b *Request) int { return cmp.Compare(a.Seq, b.Seq) })
	return out
}

// Drain ends every request, waiting or active, with reason and err, and
// returns them. Used when the loop stops.
func (s *Scheduler) Drain(reason string, err error) []*Request {
	var out []*Request
	for _, r := range s.waiting {
		r.Finish, r.Err = reason, err
		out = append(out, r)
	}
	s.waiting = nil
	clear(s.byTag)
	clear(s.byID)
	for id, r := range s.active {
		if r.Finish == "" {
			r.Finish, r.Err = reason, err
			out = append(out, r)
		}
		s.leave(id)
	}
	slices.SortFunc(out, func(a, b *Request) int { return cmp.Compare(a.Seq, b.Seq) })
	return out
}
