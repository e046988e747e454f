package core

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/broadcast/api"
)

const testEOS = 2

func newReq(maxTokens int) *Request {
	return &Request{Prompt: []int32{5, 6}, MaxTokens: maxTokens}
}

func admittedSeqs(st *broadcast.Step) []uint64 {
	var out []uint64
	for _, a := range st.Admitted {
		out = append(out, a.Seq)
	}
	return out
}

// stepper drives a Scheduler and a Mirror the way rank 0's loop does:
// Next, Apply, then Sampled with the mirror's rows.
type stepper struct {
	t      *testing.T
	sched  *Scheduler
	mirror *Mirror
	k      uint64
}

func newStepper(t *testing.T, cfg SchedulerConfig) *stepper {
	return &stepper{t: t, sched: mustScheduler(t, cfg), mirror: NewMirror(1), k: 1}
}

// next builds and applies the next step; nil when the scheduler is idle.
func (s *stepper) next() *broadcast.Step {
	s.t.Helper()
	st := s.sched.Next(1, s.k)
	if st == nil {
		return nil
	}
	if err := s.mirror.Apply(st); err != nil {
		s.t.Fatalf("mirror refused the scheduler's step %d: %v", s.k, err)
	}
	s.k++
	return st
}

// sample reports tok for every row (or per-sequence overrides).
func (s *stepper) sample(tok int32, per map[uint64]int32, errs map[uint64]error) []Event {
	s.t.Helper()
	rows := s.mirror.Rows()
	tokens := make([]int32, len(rows))
	var es []error
	if errs != nil {
		es = make([]error, len(rows))
	}
	for i, r := range rows {
		tokens[i] = tok
		if v, ok := per[r.ID]; ok {
			tokens[i] = v
		}
		if e, ok := errs[r.ID]; ok {
			es[i] = e
		}
	}
	return s.sched.Sampled(rows, tokens, es)
}

func TestSchedulerFIFOAndMaxBatch(t *testing.T) {
	s := newStepper(t, SchedulerConfig{MaxBatch: 2, MaxQueue: 10, EOS: -1})
	var reqs []*Request
	for i := range 5 {
		r := newReq(1 + i) // request i finishes after i+1 tokens
		if err := s.sched.Submit(r); err != nil {
			t.Fatal(err)
		}
		if r.Seq != uint64(i+1) {
			t.Fatalf("request %d got sequence %d", i, r.Seq)
		}
		reqs = append(reqs, r)
	}
	if s.sched.Waiting() != 5 || s.sched.Active() != 0 || s.sched.Idle() {
		t.Fatalf("waiting %d, active %d, idle %v", s.sched.Waiting(), s.sched.Active(), s.sched.Idle())
	}
	st := s.next()
	if got := admittedSeqs(st); !slices.Equal(got, []uint64{1, 2}) {
		t.Fatalf("step 1 admitted %v, want the two oldest", got)
	}
	if len(st.Tokens) != 0 || len(st.Removed) != 0 {
		t.Fatalf("step 1 carries tokens %v / removals %v", st.Tokens, st.Removed)
	}
	var order []uint64
	order = append(order, admittedSeqs(st)...)
	for range 20 {
		if len(s.mirror.Rows()) > 2 {
			t.Fatalf("batch of %d rows exceeds MaxBatch 2", len(s.mirror.Rows()))
		}
		s.sample(7, nil, nil)
		st = s.next()
		if st == nil {
			break
		}
		order = append(order, admittedSeqs(st)...)
	}
	if !slices.Equal(order, []uint64{1, 2, 3, 4, 5}) {
		t.Fatalf("admission order %v, want FIFO", order)
	}
	for i, r := range reqs {
		if r.Finish != api.FinishLength || len(r.Output) != i+1 {
			t.Errorf("request %d: finish %q, %d tokens", i, r.Finish, len(r.Output))
		}
	}
	if !s.sched.Idle() || s.sched.Next(1, s.k) != nil {
		t.Fatal("scheduler not idle after every request finished")
	}
}

// TestSchedulerRemovalCarriesLastToken: the step after a finishing token
// carries that token and the removal together.
func TestSchedulerRemovalCarriesLastToken(t *testing.T) {
	s := newStepper(t, SchedulerConfig{MaxBatch: 4, MaxQueue: 4, EOS: -1})
	short, long := newReq(1), newReq(3)
	_ = s.sched.Submit(short)
	_ = s.sched.Submit(long)
	s.next()
	ev := s.sample(0, map[uint64]int32{short.Seq: 11, long.Seq: 21}, nil)
	if len(ev) != 2 || !ev[0].Done || ev[0].Token != 11 || ev[0].Index != 0 || ev[1].Done {
		t.Fatalf("events %+v", ev)
	}
	if short.Finish != api.FinishLength {
		t.Fatalf("short request finish %q", short.Finish)
	}
	st := s.next()
	wantTokens := []broadcast.Token{{Seq: short.Seq, Token: 11}, {Seq: long.Seq, Token: 21}}
	if !slices.Equal(st.Tokens, wantTokens) || !slices.Equal(st.Removed, []uint64{short.Seq}) {
		t.Fatalf("step 2 tokens %v removed %v, want %v removed [%d]", st.Tokens, st.Removed, wantTokens, short.Seq)
	}
	if s.sched.Request(short.Seq) != nil || s.sched.Request(long.Seq) != long {
		t.Fatal("finished request still active, or live one lost")
	}
	if got := ids(s.mirror.Rows()); !slices.Equal(got, []uint64{long.Seq}) {
		t.Fatalf("mirror rows %v", got)
	}
	if got := s.mirror.Lookup(long.Seq).Output; !slices.Equal(got, []int32{21}) {
		t.Fatalf("mirror output %v", got)
	}
}

func TestSchedulerStopConditions(t *testing.T) {
	for _, tc := range []struct {
		name       string
		params     api.Params
		maxTokens  int
		tokens     []int32
		wantFinish string
		wantLen    int
	}{
		{"eos stops", api.Params{}, 10, []int32{5, testEOS, 5}, api.FinishStop, 2},
		{"eos ignored", api.Params{IgnoreEOS: true}, 3, []int32{testEOS, testEOS, testEOS}, api.FinishLength, 3},
		{"stop token", api.Params{StopTokenIDs: []int32{9, 8}}, 10, []int32{5, 8}, api.FinishStop, 2},
		{"stop token with ignore_eos", api.Params{IgnoreEOS: true, StopTokenIDs: []int32{9}}, 10, []int32{testEOS, 9}, api.FinishStop, 2},
		{"min tokens blocks eos", api.Params{MinTokens: 3}, 10, []int32{testEOS, testEOS, 5, testEOS}, api.FinishStop, 4},
		{"min tokens blocks stop token", api.Params{MinTokens: 2, StopTokenIDs: []int32{9}}, 10, []int32{9, 9}, api.FinishStop, 2},
		{"min tokens reached exactly", api.Params{MinTokens: 1}, 10, []int32{testEOS}, api.FinishStop, 1},
		{"max tokens", api.Params{}, 2, []int32{5, 6, 7}, api.FinishLength, 2},
		{"max tokens one", api.Params{}, 1, []int32{5}, api.FinishLength, 1},
		{"stop on the last allowed token is a stop", api.Params{}, 2, []int32{5, testEOS}, api.FinishStop, 2},
		{"min tokens past max tokens", api.Params{MinTokens: 5}, 2, []int32{testEOS, testEOS}, api.FinishLength, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStepper(t, SchedulerConfig{MaxBatch: 1, MaxQueue: 1, EOS: testEOS})
			r := &Request{Prompt: []int32{1}, MaxTokens: tc.maxTokens, Params: tc.params}
			if err := s.sched.Submit(r); err != nil {
				t.Fatal(err)
			}
			for i, tok := range tc.tokens {
				if s.next() == nil {
					t.Fatalf("scheduler idle before token %d", i)
				}
				ev := s.sample(tok, nil, nil)
				if len(ev) != 1 || ev[0].Token != tok || ev[0].Index != i {
					t.Fatalf("token %d: events %+v", i, ev)
				}
				if ev[0].Done {
					if i+1 != tc.wantLen {
						t.Fatalf("finished after %d tokens, want %d", i+1, tc.wantLen)
					}
					break
				}
			}
			if r.Finish != tc.wantFinish || len(r.Output) != tc.wantLen || r.Err != nil {
				t.Fatalf("finish %q after %v (err %v), want %q after %d tokens", r.Finish, r.Output, r.Err, tc.wantFinish, tc.wantLen)
			}
			// The final token and the removal go out in one more step.
			st := s.next()
			if st == nil || len(st.Removed) != 1 || len(st.Tokens) != 1 || st.Tokens[0].Token != r.Output[len(r.Output)-1] {
				t.Fatalf("closing step %+v", st)
			}
			if !s.sched.Idle() {
				t.Fatal("not idle after the closing step")
			}
		})
	}
}

func TestSchedulerErrorRows(t *testing.T) {
	s := newStepper(t, SchedulerConfig{MaxBatch: 3, MaxQueue: 3, EOS: -1})
	a, b, c := newReq(5), newReq(5), newReq(5)
	for _, r := range []*Request{a, b, c} {
		_ = s.sched.Submit(r)
	}
	s.next()
	bad := errors.New("logits of row 1 hold NaN")
	// The picker may leave any value in tokens for an error row.
	ev := s.sample(4, map[uint64]int32{b.Seq: 123}, map[uint64]error{b.Seq: bad})
	if len(ev) != 3 {
		t.Fatalf("events %+v", ev)
	}
	if e := ev[1]; e.Req != b || !e.Done || e.Token != NoToken {
		t.Fatalf("error row event %+v", e)
	}
	if b.Finish != api.FinishError || !errors.Is(b.Err, bad) || len(b.Output) != 0 {
		t.Fatalf("error row request: finish %q, err %v, output %v", b.Finish, b.Err, b.Output)
	}
	for _, r := range []*Request{a, c} {
		if r.Finish != "" || !slices.Equal(r.Output, []int32{4}) {
			t.Fatalf("healthy row %d: finish %q, output %v", r.Seq, r.Finish, r.Output)
		}
	}
	st := s.next()
	if !slices.Contains(st.Tokens, broadcast.Token{Seq: b.Seq, Token: NoToken}) || !slices.Equal(st.Removed, []uint64{b.Seq}) {
		t.Fatalf("step after the error: tokens %v, removed %v", st.Tokens, st.Removed)
	}
	if got := s.mirror.Lookup(a.Seq).Output; !slices.Equal(got, []int32{4}) {
		t.Fatalf("mirror output of a healthy row %v", got)
	}
}

// TestSchedulerNoTokenWithoutError: a picker that leaves NoToken in a row
// without an error (or passes no errs at all) ends that request with an
// error instead of crashing rank 0.
func TestSchedulerNoTokenWithoutError(t *testing.T) {
	s := newStepper(t, SchedulerConfig{MaxBatch: 2, MaxQueue: 2, EOS: -1})
	a, b := newReq(5), newReq(5)
	_ = s.sched.Submit(a)
	_ = s.sched.Submit(b)
	s.next()
	ev := s.sample(3, map[uint64]int32{a.Seq: NoToken}, nil)
	if len(ev) != 2 || !ev[0].Done || a.Finish != api.FinishError || a.Err == nil {
		t.Fatalf("events %+v, request %+v", ev, a)
	}
	if b.Finish != "" || !slices.Equal(b.Output, []int32{3}) {
		t.Fatalf("other row: %+v", b)
	}
	s.next()
}

func TestSchedulerOverload(t *testing.T) {
	s := newStepper(t, SchedulerConfig{MaxBatch: 1, MaxQueue: 2, EOS: -1})
	for range 2 {
		if err := s.sched.Submit(newReq(1)); err != nil {
			t.Fatal(err)
		}
	}
	r := newReq(1)
	if err := s.sched.Submit(r); !errors.Is(err, ErrOverloaded) {
		t.Fatalf("third submit: err = %v, want ErrOverloaded", err)
	}
	if r.Seq != 0 {
		t.Fatalf("refused request got sequence %d", r.Seq)
	}
	// Admission frees a queue slot: the batch row is not a queue slot.
	s.next()
	if err := s.sched.Submit(newReq(1)); err != nil {
		t.Fatalf("submit after admission: %v", err)
	}
	if err := s.sched.Submit(newReq(1)); !errors.Is(err, ErrOverloaded) {
		t.Fatalf("err = %v, want ErrOverloaded", err)
	}
	if s.sched.Waiting() != 2 || s.sched.Active() != 1 {
		t.Fatalf("waiting %d active %d", s.sched.Waiting(), s.sched.Active())
	}
}

func TestSchedulerDrain(t *testing.T) {
	s := newStepper(t, SchedulerConfig{MaxBatch: 2, MaxQueue: 5, EOS: -1})
	reqs := []*Request{newReq(1), newReq(9), newReq(9), newReq(9)}
	for _, r := range reqs {
		_ = s.sched.Submit(r)
	}
	s.next()
	s.sample(1, nil, nil) // reqs[0] finishes; its removal is pending
	cause := errors.New("peer lost")
	drained := s.sched.Drain(api.FinishError, cause)
	var got []uint64
	for _, r := range drained {
		got = append(got, r.Seq)
		if r.Finish != api.FinishError || !errors.Is(r.Err, cause) {
			t.Errorf("drained request %d: finish %q err %v", r.Seq, r.Finish, r.Err)
		}
	}
	if !slices.Equal(got, []uint64{2, 3, 4}) {
		t.Fatalf("drained %v, want the unfinished requests in sequence order", got)
	}
	if reqs[0].Finish != api.FinishLength {
		t.Fatalf("already finished request re-finished as %q", reqs[0].Finish)
	}
	if s.sched.Waiting() != 0 {
		t.Fatalf("%d still waiting after drain", s.sched.Waiting())
	}
	if again := s.sched.Drain(api.FinishError, cause); len(again) != 0 {
		t.Fatalf("second drain returned %d requests", len(again))
	}
}

func TestSchedulerIdle(t *testing.T) {
	sched := mustScheduler(t, SchedulerConfig{MaxBatch: 1, MaxQueue: 1, EOS: -1})
	if !sched.Idle() || sched.Next(1, 1) != nil {
		t.Fatal("new scheduler is not idle")
	}
	if sched.Request(1) != nil {
		t.Fatal("unknown request found")
	}
}

// TestSchedulerMirrorScenario runs the scheduler and a mirror together over
// many steps with seeded random requests, tokens and sampling errors, and
// checks the invariants after every step; a second mirror gets every step
// through the wire codec, as a follower does.
func TestSchedulerMirrorScenario(t *testing.T) {
	for seed := range uint64(5) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			scenario(t, seed)
		})
	}
}

// The scenario's sizes: a small vocabulary so stop tokens come up often,
// more requests than the queue holds so Submit is refused at times.
const (
	scenarioVocab    = 16
	scenarioRequests = 60
	scenarioMaxBatch = 4
	scenarioMaxQueue = 6
)

// scenarioRun is one seeded run of the scheduler with rank 0's mirror and a
// follower's mirror fed through the wire codec.
type scenarioRun struct {
	t            *testing.T
	rng          *rand.Rand
	codec        *broadcast.Codec
	s            *stepper
	follower     *Mirror
	all          []*Request
	lastAdmitted uint64
	decoded      broadcast.Step
	submitted    int
}

func scenario(t *testing.T, seed uint64) {
	sc := &scenarioRun{
		t:        t,
		rng:      rand.New(rand.NewPCG(seed, 42)),
		codec:    broadcast.NewCodec(broadcast.JobHash("scenario"), nil),
		s:        newStepper(t, SchedulerConfig{MaxBatch: scenarioMaxBatch, MaxQueue: scenarioMaxQueue, EOS: testEOS}),
		follower: NewMirror(1),
	}
	for step := 0; ; step++ {
		if step > 10000 {
			t.Fatal("scenario did not finish")
		}
		sc.submit()
		st := sc.s.next()
		if st == nil {
			if sc.submitted == scenarioRequests {
				break
			}
			continue
		}
		sc.checkStep(st)
		sc.sample(st)
	}
	s, follower := sc.s, sc.follower
	if !s.sched.Idle() || len(s.mirror.Rows()) != 0 || len(follower.Rows()) != 0 {
		t.Fatalf("scheduler or mirrors not empty at the end: idle %v, rows %d / %d", s.sched.Idle(), len(s.mirror.Rows()), len(follower.Rows()))
	}
	if len(sc.all) != scenarioRequests {
		t.Fatalf("%d requests submitted", len(sc.all))
	}
	for _, r := range sc.all {
		checkScenarioRequest(t, r)
	}
}

// submit submits random requests until a coin says stop, all are in, or
// the queue is full.
func (sc *scenarioRun) submit() {
	t, rng, s := sc.t, sc.rng, sc.s
	for sc.submitted < scenarioRequests && rng.IntN(3) == 0 {
		r := &Request{Prompt: []int32{int32(rng.IntN(scenarioVocab))}, MaxTokens: 1 + rng.IntN(12)}
		if rng.IntN(3) == 0 {
			r.Params.StopTokenIDs = []int32{int32(rng.IntN(scenarioVocab))}
		}
		if rng.IntN(4) == 0 {
			r.Params.IgnoreEOS = true
		}
		if rng.IntN(4) == 0 {
			r.Params.MinTokens = rng.IntN(6)
		}
		err := s.sched.Submit(r)
		if errors.Is(err, ErrOverloaded) {
			if s.sched.Waiting() != scenarioMaxQueue {
				t.Fatalf("overloaded with %d waiting", s.sched.Waiting())
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		sc.all = append(sc.all, r)
		sc.submitted++
	}
}

// checkStep applies st to the follower through the codec and checks the
// invariants: same digest, FIFO admission, a full batch while requests
// wait, and every row a live request that both mirrors agree on.
func (sc *scenarioRun) checkStep(st *broadcast.Step) {
	t, s, follower := sc.t, sc.s, sc.follower
	if err := sc.codec.DecodeStep(sc.codec.AppendStep(nil, st), &sc.decoded); err != nil {
		t.Fatal(err)
	}
	if err := follower.Apply(&sc.decoded); err != nil {
		t.Fatalf("follower refused step %d: %v", st.Step, err)
	}
	if follower.Digest() != s.mirror.Digest() {
		t.Fatalf("step %d: follower digest %x, rank 0 %x", st.Step, follower.Digest(), s.mirror.Digest())
	}
	for _, a := range st.Admitted {
		if a.Seq <= sc.lastAdmitted {
			t.Fatalf("step %d admitted %d after %d: not FIFO", st.Step, a.Seq, sc.lastAdmitted)
		}
		sc.lastAdmitted = a.Seq
	}

	rows := s.mirror.Rows()
	if len(rows) > scenarioMaxBatch || len(rows) != s.sched.Active() {
		t.Fatalf("step %d: %d rows, %d active, max %d", st.Step, len(rows), s.sched.Active(), scenarioMaxBatch)
	}
	if s.sched.Waiting() > 0 && len(rows) < scenarioMaxBatch {
		t.Fatalf("step %d: %d waiting while only %d of %d rows are used", st.Step, s.sched.Waiting(), len(rows), scenarioMaxBatch)
	}
	for _, row := range rows {
		r := s.sched.Request(row.ID)
		if r == nil || r.Finish != "" {
			t.Fatalf("step %d: row %d has no live request (%+v)", st.Step, row.ID, r)
		}
		if !slices.Equal(row.Output, r.Output) || !slices.Equal(row.Prompt, r.Prompt) {
			t.Fatalf("step %d: row %d output %v, request has %v", st.Step, row.ID, row.Output, r.Output)
		}
		if f := follower.Lookup(row.ID); f == nil || !slices.Equal(f.Output, row.Output) {
			t.Fatalf("step %d: follower row %d differs", st.Step, row.ID)
		}
	}
}

// sample gives every row of step st a random token, or now and then a
// sampling error, and checks the events the scheduler returns.
func (sc *scenarioRun) sample(st *broadcast.Step) {
	t, rng := sc.t, sc.rng
	rows := sc.s.mirror.Rows()
	tokens := make([]int32, len(rows))
	errs := make([]error, len(rows))
	for i := range rows {
		tokens[i] = int32(rng.IntN(scenarioVocab))
		if rng.IntN(40) == 0 {
			errs[i] = fmt.Errorf("row %d: bad logits", i)
		}
	}
	events := sc.s.sched.Sampled(rows, tokens, errs)
	if len(events) != len(rows) {
		t.Fatalf("step %d: %d events for %d rows", st.Step, len(events), len(rows))
	}
	for i, ev := range events {
		r := ev.Req
		if r.Seq != rows[i].ID {
			t.Fatalf("event %d for sequence %d, row holds %d", i, r.Seq, rows[i].ID)
		}
		switch {
		case errs[i] != nil:
			if ev.Token != NoToken || !ev.Done || r.Finish != api.FinishError || !errors.Is(r.Err, errs[i]) {
				t.Fatalf("error row: event %+v, request %+v", ev, r)
			}
		default:
			if ev.Token != tokens[i] || ev.Index != len(r.Output)-1 || r.Output[ev.Index] != tokens[i] {
				t.Fatalf("event %+v for request with output %v", ev, r.Output)
			}
			if ev.Done != (r.Finish != "") {
				t.Fatalf("event done %v, finish %q", ev.Done, r.Finish)
			}
		}
	}
}

// checkScenarioRequest checks a finished request's outcome against its
// parameters: the finish reason fits its output, and it did not run past
// its limit or an earlier stop.
func checkScenarioRequest(t *testing.T, r *Request) {
	t.Helper()
	n := len(r.Output)
	switch r.Finish {
	case api.FinishLength:
		if n != r.MaxTokens {
			t.Errorf("request %d: length finish after %d of %d tokens", r.Seq, n, r.MaxTokens)
		}
	case api.FinishStop:
		last := r.Output[n-1]
		eos := last == testEOS && !r.Params.IgnoreEOS
		stopToken := slices.Contains(r.Params.StopTokenIDs, last)
		if n < r.Params.MinTokens || !eos && !stopToken {
			t.Errorf("request %d: stop after %v (params %+v)", r.Seq, r.Output, r.Params)
		}
	case api.FinishError:
		if r.Err == nil {
			t.Errorf("request %d: error finish without an error", r.Seq)
		}
	default:
		t.Errorf("request %d: finish %q", r.Seq, r.Finish)
	}
	if n > r.MaxTokens {
		t.Errorf("request %d: %d tokens, max %d", r.Seq, n, r.MaxTokens)
	}
	// No stop before min_tokens and no earlier stop token.
	for i, tok := range r.Output[:max(n-1, 0)] {
		stop := (tok == testEOS && !r.Params.IgnoreEOS) || slices.Contains(r.Params.StopTokenIDs, tok)
		if stop && i+1 >= r.Params.MinTokens {
			t.Errorf("request %d: went past a stop token at %d: %v", r.Seq, i, r.Output)
		}
	}
}

// TestSchedulerMaxStepBytes: admissions that would push a step past
// MaxStepBytes wait for later steps, in order; the first admission of a
// step always goes (the driver refuses prompts that could never fit).
func TestSchedulerMaxStepBytes(t *testing.T) {
	prompt := make([]int32, 100) // 412 bytes admitted
	limit := broadcast.StepSize(&broadcast.Step{}) + broadcast.AdmissionSize(len(prompt)) + 50
	s := newStepper(t, SchedulerConfig{MaxBatch: 8, MaxQueue: 8, EOS: -1, MaxStepBytes: limit})
	for range 3 {
		_ = s.sched.Submit(&Request{Prompt: prompt, MaxTokens: 100})
	}
	var order []uint64
	for range 3 {
		st := s.next()
		if got := broadcast.StepSize(st); got > limit {
			t.Fatalf("step %d is %d bytes, limit %d", st.Step, got, limit)
		}
		if len(st.Admitted) != 1 {
			t.Fatalf("step %d admitted %d requests, want 1", st.Step, len(st.Admitted))
		}
		order = append(order, admittedSeqs(st)...)
		s.sample(3, nil, nil)
	}
	if !slices.Equal(order, []uint64{1, 2, 3}) {
		t.Fatalf("admission order %v", order)
	}
	// A prompt larger than the limit on its own is still admitted, alone.
	big := &Request{Prompt: make([]int32, 1000), MaxTokens: 1}
	_ = s.sched.Submit(big)
	if st := s.next(); !slices.Equal(admittedSeqs(st), []uint64{big.Seq}) {
		t.Fatalf("oversized prompt: admitted %v", admittedSeqs(st))
	}
}

// TestFirstTokensFirst: rank 0 sends a step's replies with the first
// tokens of newly admitted requests before the others' next tokens, each
// group in row order.
func TestFirstTokensFirst(t *testing.T) {
	s := newStepper(t, SchedulerConfig{MaxBatch: 4, MaxQueue: 10, EOS: -1})
	submit := func() *Request {
		r := newReq(10)
		if err := s.sched.Submit(r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	a, b := submit(), submit()
	s.next()
	s.sample(7, nil, nil) // a and b have their first tokens
	c, d := submit(), submit()
	s.next() // rows a, b, c, d
	events := firstTokensFirst(s.sample(7, nil, nil))
	var got []*Request
	var idx []int
	for _, ev := range events {
		got, idx = append(got, ev.Req), append(idx, ev.Index)
	}
	if want := []*Request{c, d, a, b}; !slices.Equal(got, want) || !slices.Equal(idx, []int{0, 0, 1, 1}) {
		t.Fatalf("event order %v (indices %v), want c, d (first tokens) then a, b", seqsOf(got), idx)
	}
}

func seqsOf(rs []*Request) []uint64 {
	out := make([]uint64, len(rs))
	for i, r := range rs {
		out[i] = r.Seq
	}
	return out
}

// mustScheduler is NewScheduler for a configuration the test knows valid.
func mustScheduler(t *testing.T, cfg SchedulerConfig) *Scheduler {
	t.Helper()
	s, err := NewScheduler(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
