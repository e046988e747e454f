package core

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tpcoord/tpcoord/broadcast/api"
)

// t0 is the fake clock's start: the core reads no clock of its own.
var t0 = time.Date(2026, 12, 6, 8, 0, 0, 0, time.UTC)

const timeout = 2 * time.Second

func newLeader(maxBatch, maxQueue int, resume ...*Request) *Leader {
	l, err := NewLeader(LeaderConfig{Scheduler: SchedulerConfig{MaxBatch: maxBatch, MaxQueue: maxQueue, EOS: testEOS}, ClientTimeout: timeout}, resume, t0)
	if err != nil {
		panic(err) // the tests' configurations are valid
	}
	return l
}

func tagged(tag string, keepalives bool) *Request {
	return &Request{Prompt: []int32{5, 6}, MaxTokens: 8, Tag: tag, Keepalives: keepalives}
}

func tags(rs []*Request) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Tag)
	}
	return out
}

// TestLeaderSubmitAndRefuse: new requests are queued in arrival order and
// admitted by the same boundary's step; one past the queue is refused as
// overloaded, and the queue is not touched by it.
func TestLeaderSubmitAndRefuse(t *testing.T) {
	l := newLeader(1, 2)
	rd := l.Step(t0, 1, 1, Input{Requests: []*Request{tagged("a", false), tagged("b", false), tagged("c", false)}})
	if got := tags(rd.Submitted); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("submitted %v, want [a b]", got)
	}
	if len(rd.Refused) != 1 || rd.Refused[0].Req.Tag != "c" || rd.Refused[0].Code != api.CodeOverloaded || !errors.Is(rd.Refused[0].Err, ErrOverloaded) {
		t.Fatalf("refused %+v, want c as overloaded", rd.Refused)
	}
	if rd.Step == nil || len(rd.Step.Admitted) != 1 || !slices.Equal(tags(rd.Admitted), []string{"a"}) {
		t.Fatalf("step %+v admitted %v, want a alone (max batch 1)", rd.Step, tags(rd.Admitted))
	}
	if l.Waiting() != 1 {
		t.Fatalf("waiting %d, want 1 (b)", l.Waiting())
	}
}

// TestLeaderKeepaliveAcks: a keepalive is answered with whether rank 0
// holds the request; one without a reply subject gets no answer.
func TestLeaderKeepaliveAcks(t *testing.T) {
	l := newLeader(4, 4)
	l.Step(t0, 1, 1, Input{Requests: []*Request{tagged("a", true)}})
	rd := l.Step(t0.Add(time.Second), 1, 2, Input{Ops: []ClientOp{{Tag: "a", Ack: "inbox.1"}, {Tag: "gone", Ack: "inbox.2"}, {Tag: "a"}}})
	want := []Ack{{Subject: "inbox.1", Known: true}, {Subject: "inbox.2", Known: false}}
	if !slices.Equal(rd.Acks, want) {
		t.Fatalf("acks %+v, want %+v", rd.Acks, want)
	}
	if r := l.Request(1); r == nil || !r.LastKeepalive.Equal(t0.Add(time.Second)) {
		t.Fatalf("request a's last keepalive not recorded: %+v", r)
	}
}

// TestLeaderCancel: a cancelled waiting request leaves the queue at once;
// a cancelled admitted one ends now and its row is removed by the next
// step. Both are answered once, as cancelled.
func TestLeaderCancel(t *testing.T) {
	l := newLeader(1, 4)
	l.Step(t0, 1, 1, Input{Requests: []*Request{tagged("a", false), tagged("b", false)}})
	rd := l.Step(t0, 1, 2, Input{Ops: []ClientOp{{Tag: "b", Cancel: true}, {Tag: "a", Cancel: true}, {Tag: "a", Cancel: true}}})
	if got := tags(rd.Ended); !slices.Equal(got, []string{"b", "a"}) {
		t.Fatalf("ended %v, want [b a], each once", got)
	}
	for _, r := range rd.Ended {
		if r.Finish != api.FinishCancelled || r.Err == nil {
			t.Fatalf("%s: finish %q err %v, want cancelled with a reason", r.Tag, r.Finish, r.Err)
		}
	}
	if rd.Step == nil || !slices.Equal(rd.Step.Removed, []uint64{1}) || len(rd.Step.Admitted) != 0 {
		t.Fatalf("step %+v, want a's row removed and b never admitted", rd.Step)
	}
	if rd := l.Step(t0, 1, 3, Input{}); rd.Step != nil || l.Waiting() != 0 {
		t.Fatalf("step %+v, waiting %d: want idle", rd.Step, l.Waiting())
	}
}

// TestLeaderClientTimeout: a request whose client promised keepalives is
// cancelled once the client has been silent longer than the timeout,
// counted from submission and from each keepalive; not before, and not
// while rank 0 itself could hear nobody. A request without keepalives is
// never timed out.
func TestLeaderClientTimeout(t *testing.T) {
	l := newLeader(4, 4)
	l.Step(t0, 1, 1, Input{Requests: []*Request{tagged("a", true), tagged("quiet", false)}})
	at := func(d time.Duration, in Input) *Ready { return l.Step(t0.Add(d), 1, 2, in) }
	if rd := at(timeout, Input{}); len(rd.Ended) != 0 {
		t.Fatalf("ended %v at exactly the timeout", tags(rd.Ended))
	}
	at(timeout+100*time.Millisecond, Input{Ops: []ClientOp{{Tag: "a"}}}) // a keepalive
	if rd := at(2*timeout, Input{}); len(rd.Ended) != 0 {
		t.Fatalf("ended %v within the timeout of a keepalive", tags(rd.Ended))
	}
	deaf := t0.Add(2 * timeout)
	if rd := at(3*timeout, Input{Deaf: deaf}); len(rd.Ended) != 0 {
		t.Fatalf("ended %v while rank 0 could hear nobody %v ago", tags(rd.Ended), timeout)
	}
	rd := at(3*timeout+time.Second, Input{Deaf: deaf})
	if got := tags(rd.Ended); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("ended %v, want [a] (quiet never promised keepalives)", got)
	}
	if r := rd.Ended[0]; r.Finish != api.FinishCancelled || !strings.Contains(r.Err.Error(), "client went away") {
		t.Fatalf("a: finish %q, err %v", r.Finish, r.Err)
	}
	if rd := at(10*timeout, Input{}); len(rd.Ended) != 0 {
		t.Fatalf("ended %v again", tags(rd.Ended))
	}
}

// TestLeaderResumeGetsWholeTimeout: a resumed request whose client sent
// keepalives is queued first, and its silence counts from the new
// epoch's start: its keepalives may have gone unheard meanwhile.
func TestLeaderResumeGetsWholeTimeout(t *testing.T) {
	old := &Request{Seq: 7, Prompt: []int32{1}, Output: []int32{9}, MaxTokens: 4, Tag: "r", Keepalives: true, LastKeepalive: t0.Add(-time.Hour)}
	l := newLeader(4, 4, old)
	rd := l.Step(t0.Add(timeout), 2, 1, Input{Requests: []*Request{tagged("new", false)}})
	if len(rd.Ended) != 0 {
		t.Fatalf("resumed request ended at once: %v", rd.Ended[0].Err)
	}
	if rd.Step == nil || len(rd.Step.Admitted) != 2 || rd.Step.Admitted[0].Seq != 7 || !slices.Equal(rd.Step.Admitted[0].Output, []int32{9}) || rd.Step.Admitted[1].Seq != 8 {
		t.Fatalf("step %+v: want the resumed request first with its tokens, the new one after as seq 8", rd.Step)
	}
	if rd := l.Step(t0.Add(timeout+timeout/5), 2, 2, Input{}); !slices.Equal(tags(rd.Ended), []string{"r"}) {
		t.Fatalf("ended %v, want the silent resumed request", tags(rd.Ended))
	}
}

// TestLeaderSampledOrderAndDone: after a step, first tokens go out before
// the others' next tokens; a request that ended is no longer watched for
// silence, and Drain answers the rest.
func TestLeaderSampledOrderAndDone(t *testing.T) {
	l := newLeader(4, 4)
	m := NewMirror(1)
	step := func(now time.Time, k uint64, in Input) *Ready {
		rd := l.Step(now, 1, k, in)
		if rd.Step != nil {
			if err := m.Apply(rd.Step); err != nil {
				t.Fatal(err)
			}
		}
		return rd
	}
	step(t0, 1, Input{Requests: []*Request{tagged("a", true)}})
	l.Sampled(m.Rows(), []int32{10}, nil)
	step(t0, 2, Input{Requests: []*Request{tagged("b", true)}})
	// a ends on EOS at its second token; b gets its first.
	ev := l.Sampled(m.Rows(), []int32{testEOS, 11}, nil)
	if len(ev) != 2 || ev[0].Req.Tag != "b" || ev[0].Index != 0 || ev[1].Req.Tag != "a" || !ev[1].Done || ev[1].Req.Finish != api.FinishStop {
		t.Fatalf("events %+v: want b's first token, then a's last", ev)
	}
	if rd := step(t0.Add(5*timeout), 3, Input{Ops: []ClientOp{{Tag: "b"}}}); len(rd.Ended) != 0 {
		t.Fatalf("ended %v: a had finished, b sent a keepalive", tags(rd.Ended))
	}
	out := l.Drain(api.FinishError, errors.New("stopping"))
	if !slices.Equal(tags(out), []string{"b"}) || out[0].Finish != api.FinishError {
		t.Fatalf("drained %v, want b", tags(out))
	}
}

// TestLeaderTakeDecidesNoStep: Take answers what arrived (before InFlight
// and Drain) without building a step.
func TestLeaderTakeDecidesNoStep(t *testing.T) {
	l := newLeader(4, 1)
	rd := l.Take(t0, Input{Requests: []*Request{tagged("a", false), tagged("b", false)}})
	if rd.Step != nil || len(rd.Refused) != 1 || !slices.Equal(tags(l.InFlight()), []string{"a"}) {
		t.Fatalf("step %+v refused %d in flight %v", rd.Step, len(rd.Refused), tags(l.InFlight()))
	}
}
