package rank

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/broadcast/api"
)

// DefaultClientTimeout is how long rank 0 keeps a request whose client
// promised keepalives (api.GenerateRequest.Keepalive) or sent one, but
// has gone silent (DriverConfig.ClientTimeout): the client went away, so
// its sequence is removed. It counts from submission. Clients that neither
// promise nor send keepalives are never timed out.
const DefaultClientTimeout = 2 * time.Second

type clientOp struct {
	reply  string
	cancel bool
	ack    string // keepalive: where to send the api.KeepaliveAck ("" for none)
}

// onClient hands a client's cancel or keepalive to the loop.
func (d *Driver) onClient(m *broadcast.Msg) {
	var c api.Message
	if err := json.Unmarshal(m.Data, &c); err != nil || c.Reply == "" || (c.Op != "cancel" && c.Op != "keepalive") {
		d.reject("client", fmt.Errorf("malformed client message %q", m.Data))
		return
	}
	select {
	case d.ops <- clientOp{reply: c.Reply, cancel: c.Op == "cancel", ack: m.Reply}:
	default:
		d.reject("client_queue_full", errors.New("client message dropped"))
		return
	}
	// An idle loop applies it now, not at the next step, which may be
	// far off (a job without followers has nothing else to wake it).
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// clientOps applies queued cancels and keepalives, and cancels requests
// whose clients went silent. It runs on the loop at step boundaries.
func (d *Driver) clientOps(now time.Time) {
	for {
		select {
		case op := <-d.ops:
			if !op.cancel {
				d.alive[op.reply] = now
				r := d.sched.Find(op.reply)
				if r != nil {
					r.keepalive = now
				}
				if op.ack != "" {
					d.ack(op.ack, r != nil)
				}
				continue
			}
			if r := d.sched.Cancel(op.reply, errors.New("cancelled by the client")); r != nil {
				d.finish(r, now)
			}
			continue
		default:
		}
		break
	}
	if now.Before(d.nextSweep) {
		return
	}
	timeout := d.cfg.ClientTimeout
	d.nextSweep = now.Add(timeout / 10)
	d.mu.Lock()
	deaf := d.deafAt // nobody could be heard then: silence counts from it
	d.mu.Unlock()
	for reply, seen := range d.alive {
		if now.Sub(seen) <= timeout || now.Sub(deaf) <= timeout {
			continue
		}
		delete(d.alive, reply)
		if r := d.sched.Cancel(reply, fmt.Errorf("client went away (no keepalive for %v)", timeout)); r != nil {
			d.log.Info("client went away; request cancelled", "seq", r.Seq)
			d.finish(r, now)
		}
	}
}

// ack answers a keepalive.
func (d *Driver) ack(subject string, known bool) {
	data, _ := json.Marshal(api.KeepaliveAck{Known: known})
	_ = d.tr.Publish(&broadcast.Msg{Subject: subject, Data: data})
}
