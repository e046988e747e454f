package rank

// The bus handlers: what arrives on the job's subjects, checked and
// handed to the loop (they run on the transport's goroutines).

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/internal/fielderr"
	"github.com/tpcoord/tpcoord/rank/core"
)

// subscribe subscribes this rank's handlers. Status comes last: a rank
// that answers status has every other subscription live (the transport
// keeps a connection's subscriptions in order), so a client that saw rank
// 0 serving finds its generate subject answered.
func (d *Driver) subscribe() ([]func() error, error) {
	type handler struct {
		subject string
		fn      func(*broadcast.Msg)
	}
	var hs []handler
	if d.cfg.Rank == 0 {
		hs = []handler{{d.subj.Heartbeats(), d.onHeartbeat}, {d.subj.Generate(), d.onGenerate},
			{d.subj.Replay(), d.onReplay}, {d.subj.Client(), d.onClient}}
	} else {
		hs = []handler{{d.subj.Step(), d.onStep}, {d.subj.Heartbeat(0), d.onLeaderHeartbeat}}
	}
	// A supervisor (launch) reports ranks it saw die.
	hs = append(hs, handler{d.subj.Control(), d.onControl}, handler{d.subj.Status(), d.onStatus})
	var unsubs []func() error
	for _, h := range hs {
		u, err := d.tr.Subscribe(h.subject, h.fn)
		if err != nil {
			return unsubs, err
		}
		unsubs = append(unsubs, u)
	}
	return unsubs, nil
}

// Handlers run on the transport's delivery goroutine: they decode, hand
// off and return; none blocks.

func (d *Driver) onStep(m *broadcast.Msg) {
	epoch, k, err := d.codec.PeekStep(m.Data)
	if err != nil {
		d.reject("step", err)
		return
	}
	d.mu.Lock()
	applied := d.pos.applied
	d.mu.Unlock()
	if epoch != d.cfg.Epoch {
		d.reject("wrong_epoch", fmt.Errorf("step %d of epoch %d, this rank is in epoch %d", k, epoch, d.cfg.Epoch))
		return
	}
	if k <= applied {
		d.count("duplicate")
		return
	}
	arrived := time.Now()
	d.cfg.Metrics.observeBroadcast(m.Header, arrived)
	// Dropping is safe: the gap it leaves is filled by replay.
	size := int64(len(m.Data))
	if q, ok := d.reserveQueue(size); !ok {
		d.reject("step_queue_full", fmt.Errorf("step %d (%d bytes) dropped: %d bytes already queued, limit %d", k, size, q, d.cfg.StepQueueBytes))
		return
	}
	select {
	case d.f.steps <- stepMsg{data: append([]byte(nil), m.Data...), traceparent: m.Header[traceparentHeader], arrived: arrived}:
	default:
		d.f.queued.Add(-size)
		d.reject("step_queue_full", fmt.Errorf("step %d dropped: %d steps already queued", k, cap(d.f.steps)))
	}
}

// reserveQueue accounts size bytes to the step queue unless that would
// take it above StepQueueBytes; an empty queue takes any step, so one
// larger than the limit still gets through. It returns the bytes queued
// when it refuses. The follower loop gives the bytes back as it dequeues.
func (d *Driver) reserveQueue(size int64) (int64, bool) {
	for {
		q := d.f.queued.Load()
		if q > 0 && q+size > int64(d.cfg.StepQueueBytes) {
			return q, false
		}
		if d.f.queued.CompareAndSwap(q, q+size) {
			return q, true
		}
	}
}

func (d *Driver) onControl(m *broadcast.Msg) {
	var c api.Control
	if err := json.Unmarshal(m.Data, &c); err != nil {
		d.reject("control", err)
		return
	}
	from := c.From
	if from == "" {
		from = "rank 0"
	}
	if d.cfg.Rank == 0 && from == "rank 0" {
		return // our own announcement
	}
	switch c.Kind {
	case api.ControlAbort:
		d.Abort(fmt.Errorf("%w by %s: %s", ErrAborted, from, c.Reason))
	case api.ControlPeerLost:
		d.Abort(fmt.Errorf("%w (reported by %s): %s", ErrPeerLost, from, c.Reason))
	}
}

func (d *Driver) onHeartbeat(m *broadcast.Msg) {
	var hb broadcast.Heartbeat
	if err := d.codec.DecodeHeartbeat(m.Data, &hb); err != nil {
		d.reject("heartbeat", err, "subject", m.Subject)
		return
	}
	if hb.Rank == 0 && m.Subject == d.subj.Heartbeat(0) {
		if hb.Leader != d.cfg.Leader {
			d.reject("heartbeat_other_leader", fmt.Errorf("a rank 0 heartbeat from leader %08x, this rank 0 is %08x", hb.Leader, d.cfg.Leader), "subject", m.Subject)
		}
		return // our own
	}
	if hb.Rank == 0 || int(hb.Rank) >= d.cfg.World || m.Subject != d.subj.Heartbeat(int(hb.Rank)) {
		d.reject("heartbeat_sender", fmt.Errorf("heartbeat on %s claims rank %d", m.Subject, hb.Rank))
		return
	}
	// A follower that applied no step yet reports leader 0; one that
	// applied another leader's steps is not in this world.
	if hb.Leader != 0 && hb.Leader != d.cfg.Leader {
		d.reject("heartbeat_other_leader", fmt.Errorf("rank %d follows leader %08x, this rank 0 is %08x", hb.Rank, hb.Leader, d.cfg.Leader), "subject", m.Subject)
		return
	}
	if hb.Epoch == d.cfg.Epoch { // a stale epoch's worker is gone
		d.checkCapacity(hb.Rank, hb.KV)
	}
	d.mu.Lock()
	d.peerTab.HeardFrom(int(hb.Rank), &hb, d.cfg.Clock())
	d.mu.Unlock()
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

func (d *Driver) onStatus(m *broadcast.Msg) {
	if m.Reply == "" {
		return
	}
	st := d.Status()
	data, _ := json.Marshal(st)
	_ = d.tr.Publish(&broadcast.Msg{Subject: m.Reply, Data: data})
}

func (d *Driver) onGenerate(m *broadcast.Msg) {
	if m.Reply == "" {
		d.log.Warn("ignoring generate request without a reply subject")
		return
	}
	req, err := api.ParseGenerateRequest(m.Data, d.ex.Vocab())
	if err != nil {
		d.reply(m.Reply, api.FailedReply(err, api.CodeInvalid))
		return
	}
	if err := d.checkStructured(req.StructuredOutputs); err != nil {
		d.reply(m.Reply, api.FailedReply(err, api.CodeInvalid))
		return
	}
	if endedBefore(req, d.cfg.EOS) {
		// Resubmitted after its last token, a stop, came but its final
		// reply was lost: it ended then, as it would have.
		d.reply(m.Reply, api.GenerateReply{Done: true, FinishReason: api.FinishStop, Tokens: req.ResumeTokenIDs})
		return
	}
	// A group larger than the queue would fill it and be refused as
	// overloaded at every try: it is refused for good.
	if req.Group > d.cfg.MaxQueue {
		d.reply(m.Reply, api.FailedReply(fielderr.New("n",
			"the request's %d choices (n × prompts) are more than rank 0's queue holds (--max-queue %d): sent together they could never all be admitted; lower n (or send fewer prompts at once)",
			req.Group, d.cfg.MaxQueue), api.CodeInvalid))
		return
	}
	// A request may be re-admitted in a new epoch with all its tokens, so
	// prompt + max_tokens must fit one step message and the decoder's bound.
	total := len(req.PromptTokenIDs) + req.MaxTokens
	if need := broadcast.StepSize(&broadcast.Step{}) + d.cfg.MaxBatch*20 + broadcast.AdmissionSize(total); need > d.cfg.stepBudget() || total > broadcast.MaxPromptLen {
		d.reply(m.Reply, api.FailedReply(fielderr.New("max_tokens",
			"prompt (%d tokens) plus max_tokens (%d) do not fit in one step message (%d bytes needed, %d available under the NATS max payload; at most %d tokens); lower max_tokens, shorten the prompt or raise max_payload",
			len(req.PromptTokenIDs), req.MaxTokens, need, d.cfg.stepBudget(), broadcast.MaxPromptLen), api.CodeInvalid))
		return
	}
	r := &Request{Prompt: req.PromptTokenIDs, MaxTokens: req.MaxTokens, Params: req.Params, Tag: m.Reply, Keepalives: req.Keepalive,
		ID: req.RequestID, Output: req.ResumeTokenIDs,
		Ext: &reqState{trace: requestTrace{parent: d.remoteParent(m.Header)}, times: requestTimes{received: time.Now()}}}
	select {
	case d.l.intake <- r:
	default:
		d.reply(m.Reply, api.FailedReply(core.Overloaded(len(d.l.intake)), api.CodeOverloaded))
	}
}

// endedBefore reports whether a resubmitted request's output already ends
// with a token that stops it: EOS (unless ignore_eos) or a stop token, past
// min_tokens.
func endedBefore(req *api.GenerateRequest, eos int32) bool {
	n := len(req.ResumeTokenIDs)
	if n == 0 || n < req.MinTokens {
		return false
	}
	return core.IsStop(&req.Params, eos, req.ResumeTokenIDs[n-1])
}
