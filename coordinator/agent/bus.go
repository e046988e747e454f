package agent

import (
	"context"
	"fmt"
	"sync"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/broadcast/natsbus"
	"github.com/tpcoord/tpcoord/internal/fielderr"
	"github.com/tpcoord/tpcoord/internal/lifecycle"
)

// Bus is how an agent reaches its job's message bus.
type Bus struct {
	// Main carries every message but rank 0's steps.
	Main broadcast.Transport
	// Steps, if set, is where rank 0 publishes its steps (the agent's NATS
	// bus gives them a connection that writes each one out at once).
	Steps broadcast.Transport
	// Closed is closed when the bus is gone for good (NATS reconnects
	// exhausted); the running epoch then aborts. Nil: never.
	Closed <-chan struct{}
	// MaxPayload bounds one message (0: 1 MiB).
	MaxPayload int
}

// connectNATS connects the agent to the NATS server named by cfg.NATS,
// hosting it first when cfg.NATSServe is set. Every connection and server
// it makes is registered with g, to close in the reverse order of making.
func (r *run) connectNATS(ctx context.Context, g *lifecycle.Group) (*Bus, error) {
	cfg, log := r.a.cfg, r.log
	closed := make(chan struct{})
	var once sync.Once
	ncfg := natsbus.Config{URL: cfg.NATS, Name: fmt.Sprintf("tpcoord-%s-r%d", cfg.Job, cfg.Rank), Logger: log, Auth: cfg.NATSAuth,
		OnClosed: func() { once.Do(func() { close(closed) }) }}
	if cfg.NATSServe {
		serve := func() (*natsbus.Server, error) { return natsbus.Serve(cfg.NATS) }
		if cfg.NATSServeClients != "" {
			serve = func() (*natsbus.Server, error) {
				return natsbus.ServeJob(cfg.NATS, cfg.NATSServeClients, broadcast.Subjects{Prefix: cfg.Prefix, Job: cfg.Job})
			}
		}
		srv, err := serve()
		if err != nil {
			return nil, fielderr.New("NATS", "%w", err)
		}
		_ = g.AddCloser("embedded NATS server", func() error { srv.Close(); return nil })
		ncfg.InProcess = srv
		log.Info("NATS server started in this process", "url", natsbus.Redact(srv.URL()))
	}
	nc, err := natsbus.ConnectWait(ctx, ncfg, cfg.RendezvousTimeout)
	if err != nil {
		return nil, fielderr.Within("NATSAuth", err)
	}
	_ = g.AddCloser("NATS connection", func() error { nc.Close(); return nil })
	bus := &Bus{Main: nc, Closed: closed, MaxPayload: nc.MaxPayload()}
	// Rank 0 publishes its steps on a connection of their own that writes
	// each one out in the publishing goroutine (no wake-up of nats.go's
	// flusher on the way); client replies and heartbeats stay batched on
	// the main one. Heartbeats may then overtake a step; followers only
	// act on a rank 0 heartbeat a whole interval old.
	if cfg.Rank == 0 {
		scfg := ncfg
		scfg.Name, scfg.WriteThrough = ncfg.Name+"-steps", true // OnClosed shared: either closing for good ends the agent
		steps, err := natsbus.Connect(scfg)
		if err != nil {
			return nil, err
		}
		_ = g.AddCloser("NATS step connection", func() error { steps.Close(); return nil })
		bus.Steps = steps
	}
	return bus, nil
}
