package rank

// Replies: what rank 0 tells requesters, and the drain when it stops.

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/rank/client"
)

func (d *Driver) reply(subject string, r api.GenerateReply) {
	data, _ := json.Marshal(r)
	d.publishReply(subject, data)
}

func (d *Driver) publishReply(subject string, data []byte) {
	if err := d.tr.Publish(&broadcast.Msg{Subject: subject, Data: data}); err != nil {
		d.log.Warn("reply failed", "subject", subject, "err", err)
	}
}

func (d *Driver) publishControl(c api.Control) {
	data, _ := json.Marshal(c)
	_ = d.tr.Publish(&broadcast.Msg{Subject: d.subj.Control(), Data: data})
}

func (d *Driver) stream(events []Event) {
	now := time.Now()
	for _, ev := range events {
		r := ev.Req
		t := &state(r).times
		if ev.Token != NoToken && r.Err == nil {
			if t.first.IsZero() {
				t.first = now
			}
			t.last = now
			d.publishReply(r.Tag, client.AppendTokenReply(nil, ev.Token, ev.Index))
		}
		if ev.Done {
			if j := d.l.lp.pending(r); j != nil {
				j.finish = true // after its logprobs
				continue
			}
			d.finish(r, now)
		}
	}
}

// sendLogprobs sends the logprobs computed for the last sampled tokens,
// then the final replies that waited for them.
func (d *Driver) sendLogprobs() {
	if d.l == nil {
		return
	}
	now := time.Now()
	for _, j := range d.l.lp.wait() {
		if j.err == nil {
			res := j.res
			d.reply(j.req.Tag, api.GenerateReply{Index: j.index, Logprobs: &res})
		} else {
			d.log.Warn("logprobs failed", "seq", j.req.Seq, "err", j.err)
		}
		if j.finish {
			d.finish(j.req, now)
		}
	}
}

func (d *Driver) finish(r *Request, now time.Time) {
	d.requestFinished(r, now)
	rep := api.GenerateReply{Done: true, FinishReason: r.Finish, Tokens: r.Output}
	if rep.Tokens == nil {
		rep.Tokens = []int32{}
	}
	if r.Err != nil {
		rep.Error = r.Err.Error()
		if errors.Is(r.Err, errDrained) {
			// The job may come back (systemd restarts it; the world
			// re-forms): a client may submit it again from its tokens.
			rep.ErrorCode = api.CodeUnavailable
		}
	}
	if t := state(r).times; !t.received.IsZero() {
		tm := &api.Timings{TotalMs: ms(now.Sub(t.received))}
		if !t.scheduled.IsZero() {
			tm.QueueMs = ms(t.scheduled.Sub(t.received))
		}
		if !t.first.IsZero() {
			tm.FirstTokenMs = ms(t.first.Sub(t.received))
			if n := len(r.Output); n > 1 {
				tm.MeanITLMs = ms(t.last.Sub(t.first)) / float64(n-1)
			}
		}
		rep.Timings = tm
	}
	d.reply(r.Tag, rep)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// errDrained marks the error of a request answered because rank 0's loop
// stopped under it.
var errDrained = errors.New("rank 0 stopped")

// drain answers every open request when the loop stops, as unavailable: a
// client may submit it again (to a restarted rank 0) from its tokens.
func (d *Driver) drain(cause error) {
	d.take()
	reason, err := api.FinishError, fmt.Errorf("%w: %w", errDrained, cause)
	if cause == nil {
		err = fmt.Errorf("%w: shutting down", errDrained)
	}
	now := time.Now()
	for _, r := range d.l.core.Drain(reason, err) {
		d.finish(r, now)
	}
}
