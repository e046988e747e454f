//go:build !agentonly

package main

import (
	"context"
	"log/slog"
	"net"
	"os"

	"github.com/tpcoord/tpcoord/coordinator/gateway"
	"github.com/tpcoord/tpcoord/coordinator/launch"
	"github.com/tpcoord/tpcoord/internal/buildinfo"
	"github.com/tpcoord/tpcoord/internal/telemetry"
)

// httpGateway checks launch --http's flags; nil without --http.
func (o *launchOptions) httpGateway(log *slog.Logger) (*launchGateway, error) {
	if o.gw.cfg.Listen == "" {
		return nil, nil
	}
	cfg, opts, err := o.gw.build(o.agent.Job, o.agent.Insecure)
	if err != nil {
		return nil, err
	}
	cfg.MaxModelLen = o.agent.MaxModelLen // the ranks' bound, which /tokenize reports
	// The gateway would refuse every request of such a job (and /ready
	// say why): refuse to start it instead.
	if err := gateway.CheckVocab(o.gw.tok, o.agent.Vocab); err != nil {
		return nil, configError("tokenizer: %v (--vocab %d): give the model's own tokenizer, or its vocabulary size", err, o.agent.Vocab)
	}
	opts = append(opts, gateway.WithLogger(log), gateway.WithVersion(buildinfo.Get().Version))
	return &launchGateway{cfg: cfg, opts: opts}, nil
}

// launchGateway is launch --http's gateway, built before the job starts.
type launchGateway struct {
	cfg  gateway.Config
	opts []gateway.Option
	ln   net.Listener
	tel  *telemetry.Telemetry
}

// start listens, which gives the ready file its URL (requests wait in the
// backlog until the job is ready), and exports the gateway's request spans
// where the ranks export theirs.
func (gw *launchGateway) start(ctx context.Context, a *agentOptions, log *slog.Logger) error {
	tc := telemetry.Config{OTLPEndpoint: a.Telemetry.OTLPEndpoint, OTLPProtocol: a.Telemetry.OTLPProtocol, OTLPInsecure: a.Telemetry.OTLPInsecure}
	tel, err := telemetry.Start(ctx, tc, telemetry.Labels{Job: a.Job, Gateway: true}, telemetry.Rank{}, os.Getenv, log)
	if err != nil {
		return configError("%v", err)
	}
	gw.tel = tel
	gw.opts = append(gw.opts, gateway.WithTracer(tel.Tracer()))
	if gw.ln, err = gateway.Listen(gw.cfg); err != nil {
		tel.Close()
		return err
	}
	return nil
}

func (gw *launchGateway) close() {
	_ = gw.ln.Close()
	_ = gw.tel.Close()
}

// beside returns use with the gateway serving beside it, for as long as
// the job runs (or use runs, if given).
func (gw *launchGateway) beside(use func(context.Context, *launch.Job) error) func(context.Context, *launch.Job) error {
	if gw == nil {
		return use
	}
	return func(ctx context.Context, j *launch.Job) error {
		g, err := gateway.New(gw.cfg, j.Bus, j.Subj, gw.opts...)
		if err != nil {
			return err
		}
		if use == nil {
			return g.Serve(ctx, gw.ln)
		}
		return g.ServeWhile(ctx, gw.ln, func(ctx context.Context) error { return use(ctx, j) })
	}
}
