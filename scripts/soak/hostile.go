package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tpcoord/tpcoord/broadcast"
)

// hostile floods the job's subjects with what an attacker holding the
// ranks' (and the clients') NATS credentials could send: garbage,
// replayed, bit-flipped, truncated and stale-epoch messages, then forged
// steps: the step after the last one captured, with its leader ID and a
// valid checksum (e2e/hostile_test.go does the same).
type hostile struct {
	job      *job
	messages int // per flood
	forged   int // forged steps per flood
	rng      *rand.Rand
}

// hostileConns are connections as each NATS user; the server lets only
// rank0 publish steps and control messages and hb.0, rank the other
// heartbeats and replay requests, client requests and status.
type hostileConns struct {
	r0, rank, client *nats.Conn
	asyncErrs        atomic.Int64
}

func (h *hostile) connect() (*hostileConns, error) {
	c := &hostileConns{}
	onErr := nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) { c.asyncErrs.Add(1) })
	var err error
	for _, t := range []struct {
		user string
		dst  **nats.Conn
	}{{"rank0", &c.r0}, {"rank", &c.rank}, {"client", &c.client}} {
		if *t.dst, err = nats.Connect(h.job.nats.url(t.user), nats.Name("soak-hostile-"+t.user), onErr); err != nil {
			c.close()
			return nil, fmt.Errorf("hostile connection as %s: %w", t.user, err)
		}
	}
	return c, nil
}

func (c *hostileConns) close() {
	for _, nc := range []*nats.Conn{c.r0, c.rank, c.client} {
		if nc != nil {
			nc.Close()
		}
	}
}

// capture keeps the genuine steps and heartbeats seen, newest last.
type capture struct {
	sub   *nats.Subscription // steps
	hbSub *nats.Subscription // heartbeats
	mu    sync.Mutex
	steps [][]byte
	hbs   []*nats.Msg
}

func (c *capture) onStep(m *nats.Msg) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.steps = append(c.steps, append([]byte(nil), m.Data...))
	if len(c.steps) > 64 {
		c.steps = c.steps[1:]
	}
}

func (c *capture) onHeartbeat(m *nats.Msg) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hbs = append(c.hbs, &nats.Msg{Subject: m.Subject, Data: append([]byte(nil), m.Data...)})
	if len(c.hbs) > 64 {
		c.hbs = c.hbs[1:]
	}
}

func (c *capture) counts() (steps, hbs int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.steps), len(c.hbs)
}

// flood sends one flood of hostile messages (not the forged steps); at is
// when its first message went out.
func (h *hostile) flood(ctx context.Context) (at time.Time, detail string, err error) {
	conns, err := h.connect()
	if err != nil {
		return time.Now(), "", err
	}
	defer conns.close()
	capt := &capture{}
	if capt.sub, err = conns.rank.Subscribe(h.job.subj.Step(), capt.onStep); err != nil {
		return time.Now(), "", err
	}
	if capt.hbSub, err = conns.r0.Subscribe(h.job.subj.Heartbeats(), capt.onHeartbeat); err != nil {
		return time.Now(), "", err
	}
	deadline := time.Now().Add(5 * time.Second)
	for s, hb := capt.counts(); (s < 4 || hb < 4) && time.Now().Before(deadline); s, hb = capt.counts() {
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
			return time.Now(), "", err
		}
	}
	// The flood's own messages are not genuine ones to corrupt or forge from.
	for _, sub := range []*nats.Subscription{capt.sub, capt.hbSub} {
		if err := sub.Unsubscribe(); err != nil {
			return time.Now(), "", err
		}
	}
	at = time.Now()
	sent := h.send(conns, capt)
	for _, nc := range []*nats.Conn{conns.r0, conns.rank, conns.client} {
		if err := nc.Flush(); err != nil {
			return at, "", fmt.Errorf("flush the hostile messages: %w", err)
		}
	}
	steps, hbs := capt.counts()
	return at, fmt.Sprintf("%d messages (%s) from %d captured steps and %d heartbeats; %d asynchronous errors from the server",
		h.messages, sent, steps, hbs, conns.asyncErrs.Load()), nil
}

// forgeSteps connects and publishes the forged steps (forge).
func (h *hostile) forgeSteps(ctx context.Context) string {
	conns, err := h.connect()
	if err != nil {
		return "forging: " + err.Error()
	}
	defer conns.close()
	out := h.forge(ctx, conns)
	if err := conns.r0.Flush(); err != nil {
		out += "; flush: " + err.Error()
	}
	return out
}

// hostileKinds are the flood's messages, sent in rotation.
var hostileKinds = []string{
	"step:garbage", "step:replayed", "step:bitflip", "step:truncated", "step:stale-epoch",
	"hb:garbage", "hb:replayed", "hb:bitflip",
	"replay:garbage", "generate:garbage", "generate:invalid", "status:garbage", "client:garbage", "control:garbage",
}

// send publishes the flood's messages and counts them by kind.
func (h *hostile) send(c *hostileConns, capt *capture) string {
	counts := map[string]uint64{}
	castagnoli := crc32.MakeTable(crc32.Castagnoli)
	for i := range h.messages {
		kind := hostileKinds[i%len(hostileKinds)]
		nc, m := h.message(c, capt, kind, castagnoli)
		if m == nil {
			continue
		}
		if err := nc.PublishMsg(m); err != nil {
			counts["publish error"]++
			continue
		}
		counts[kind]++
	}
	return counters(counts)
}

// message builds one hostile message of kind and the connection allowed
// to send it; nil if nothing genuine was captured to corrupt.
func (h *hostile) message(c *hostileConns, capt *capture, kind string, castagnoli *crc32.Table) (*nats.Conn, *nats.Msg) {
	subj, rng := h.job.subj, h.rng
	capt.mu.Lock()
	var step []byte
	var hb *nats.Msg
	if len(capt.steps) > 0 {
		step = capt.steps[rng.IntN(len(capt.steps))]
	}
	if len(capt.hbs) > 0 {
		hb = capt.hbs[rng.IntN(len(capt.hbs))]
	}
	capt.mu.Unlock()
	family, variant, _ := strings.Cut(kind, ":")
	switch family {
	case "step":
		if step == nil && variant != "garbage" {
			return nil, nil
		}
		return c.r0, &nats.Msg{Subject: subj.Step(), Data: corrupt(variant, step, rng, castagnoli)}
	case "hb":
		if hb == nil && variant != "garbage" {
			return nil, nil
		}
		return h.heartbeat(c, hb, variant, castagnoli)
	}
	return h.request(c, family, variant)
}

func (h *hostile) heartbeat(c *hostileConns, hb *nats.Msg, variant string, castagnoli *crc32.Table) (*nats.Conn, *nats.Msg) {
	subject, data := h.job.subj.Heartbeat(1+h.rng.IntN(h.job.spec.world-1)), []byte(nil)
	if hb != nil {
		subject, data = hb.Subject, hb.Data
	}
	nc := c.rank
	if subject == h.job.subj.Heartbeat(0) {
		nc = c.r0
	}
	return nc, &nats.Msg{Subject: subject, Data: corrupt(variant, data, h.rng, castagnoli)}
}

// request builds garbage for the request-like subjects.
func (h *hostile) request(c *hostileConns, family, variant string) (*nats.Conn, *nats.Msg) {
	subj, rng := h.job.subj, h.rng
	inbox := "_INBOX.soak-hostile." + fmt.Sprint(rng.Uint32())
	switch family {
	case "replay":
		return c.rank, &nats.Msg{Subject: subj.Replay(), Reply: inbox, Data: randomBytes(rng, 64)}
	case "generate":
		data := randomBytes(rng, 200)
		if variant == "invalid" {
			data = fmt.Appendf(nil, `{"prompt_token_ids":[%d],"max_tokens":%d,"temperature":-1}`, rng.Int32(), rng.IntN(1<<20))
		}
		return c.client, &nats.Msg{Subject: subj.Generate(), Reply: inbox, Data: data}
	case "status":
		return c.client, &nats.Msg{Subject: subj.Status(), Reply: inbox, Data: randomBytes(rng, 64)}
	case "client":
		return c.client, &nats.Msg{Subject: subj.Client(), Reply: inbox, Data: randomBytes(rng, 64)}
	default: // control
		return c.r0, &nats.Msg{Subject: subj.Control(), Data: randomBytes(rng, 64)}
	}
}

// corrupt makes a hostile variant of a genuine message (not modified).
func corrupt(variant string, genuine []byte, rng *rand.Rand, castagnoli *crc32.Table) []byte {
	switch variant {
	case "replayed":
		return genuine
	case "bitflip":
		msg := append([]byte(nil), genuine...)
		msg[rng.IntN(len(msg))] ^= 1 << rng.IntN(8)
		return msg
	case "truncated":
		return genuine[:rng.IntN(len(genuine))]
	case "stale-epoch":
		if len(genuine) < 24 {
			return genuine
		}
		msg := append([]byte(nil), genuine[:len(genuine)-4]...)
		binary.LittleEndian.PutUint32(msg[16:], 0xffffffff)
		return binary.LittleEndian.AppendUint32(msg, crc32.Checksum(msg, castagnoli))
	default: // garbage
		return randomBytes(rng, 200)
	}
}

func randomBytes(rng *rand.Rand, most int) []byte {
	b := make([]byte, rng.IntN(most+1))
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// forge publishes forged steps as an attacker racing rank 0 would: as
// soon as a genuine step k arrives, step k+1 with its epoch and leader ID,
// a valid checksum and nothing else, with rank 0's NATS credentials; at
// most h.forged of them, 300 ms apart at least, within 10 s.
func (h *hostile) forge(ctx context.Context, c *hostileConns) string {
	job := broadcast.JobHash(h.job.spec.name)
	made := make(chan string, h.forged)
	var mu sync.Mutex
	var last time.Time
	n := 0
	sub, err := c.rank.Subscribe(h.job.subj.Step(), func(m *nats.Msg) {
		var st broadcast.Step
		if decodeStep(m.Data, job, &st) != nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if n >= h.forged || time.Since(last) < 300*time.Millisecond {
			return
		}
		n, last = n+1, time.Now()
		forged := broadcast.Step{Epoch: st.Epoch, Step: st.Step + 1, Leader: st.Leader}
		if err := c.r0.Publish(h.job.subj.Step(), encodeStep(job, &forged)); err != nil {
			made <- "publish: " + err.Error()
			return
		}
		made <- fmt.Sprintf("epoch %d step %d leader %08x (after %d rows)", forged.Epoch, forged.Step, forged.Leader, len(st.Tokens))
	})
	if err != nil {
		return "forging: " + err.Error()
	}
	defer func() { _ = sub.Unsubscribe() }()
	var out []string
	timeout := time.After(10 * time.Second)
	for len(out) < h.forged {
		select {
		case m := <-made:
			out = append(out, m)
		case <-timeout:
			out = append(out, "no more genuine steps within 10s")
			return fmt.Sprintf("%d forged steps: %s", len(out)-1, strings.Join(out, "; "))
		case <-ctx.Done():
			return fmt.Sprintf("%d forged steps: %s", len(out), strings.Join(out, "; "))
		}
	}
	return fmt.Sprintf("%d forged steps: %s", len(out), strings.Join(out, "; "))
}

// decodeStep and encodeStep are the forger's only uses of the wire codec.
// The forger holds the ranks' NATS credentials but not the job's key: its
// codec has none, so it decodes without checking MACs and encodes with a
// zero one, and keyed ranks must refuse what it makes.
func decodeStep(b []byte, job uint64, st *broadcast.Step) error {
	return broadcast.NewCodec(job, nil).DecodeStep(b, st)
}

func encodeStep(job uint64, st *broadcast.Step) []byte {
	return broadcast.NewCodec(job, nil).AppendStep(nil, st)
}
