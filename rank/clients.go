package rank

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/rank/core"
)

// DefaultClientTimeout is how long rank 0 keeps a request whose client
// promised keepalives (api.GenerateRequest.Keepalive) or sent one, but
// has gone silent (DriverConfig.ClientTimeout): the client went away, so
// its sequence is removed. It counts from submission. Clients that neither
// promise nor send keepalives are never timed out.
const DefaultClientTimeout = 2 * time.Second

// onClient hands a client's cancel or keepalive to the loop.
func (d *Driver) onClient(m *broadcast.Msg) {
	var c api.Message
	if err := json.Unmarshal(m.Data, &c); err != nil || c.Reply == "" || (c.Op != "cancel" && c.Op != "keepalive") {
		d.reject("client", fmt.Errorf("malformed client message %q", m.Data))
		return
	}
	select {
	case d.l.ops <- core.ClientOp{Tag: c.Reply, Cancel: c.Op == "cancel", Ack: m.Reply}:
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

// ack answers a keepalive.
func (d *Driver) ack(subject string, known bool) {
	data, _ := json.Marshal(api.KeepaliveAck{Known: known})
	_ = d.tr.Publish(&broadcast.Msg{Subject: subject, Data: data})
}
